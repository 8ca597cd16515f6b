"""Inputs a worker maps: each cached value version is exported once and kept while it is live.

An :class:`InputExports` owns one interpreter's input directory. For a call,
:meth:`~InputExports.prepare` gives the worker a descriptor per input: the file
already exported for that value version (nothing rewritten), a hard link to the
file its origin interpreter exported (a subagent's :meth:`sibling
<.backend.SandboxedInterpreter.sibling>`: same inode, no byte written), or a file
written now — kept for later calls when the value has a version, removed after
the call when it has none. Exports of versions no longer live are removed.
Files are read-only (mode 0444, owned by the kernel's user; the worker's
Landlock rules grant its input directory reads only).

Locking: the owner holds ``lock`` (its interpreter's) around :meth:`prepare`
and :meth:`close`; :meth:`export_once` and :meth:`files`, which other threads
call (a sibling running a subagent), take it themselves.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

from harness_magic.core.execution.sandbox.scratch import remove_quietly
from harness_magic.core.execution.sandbox.transfer_codec import input_files
from harness_magic.core.execution.sandbox.transfer_kernel import write_input

__all__ = ["InputExports"]


class InputExports:
    """Value version -> (input files, descriptor) of one interpreter, written once and mapped by every later call."""

    def __init__(self, input_dir: str, lock: threading.Lock, origin: InputExports | None = None) -> None:
        self.input_dir = input_dir
        self.lock = lock
        self.origin = origin
        """The exports of the interpreter this one is a sibling of: linked, never rewritten."""
        self.closed = False
        self.inputs_written = 0
        """Inputs serialised so far (exports and one-call inputs alike)."""
        self._exports: dict[str, tuple[list[str], dict[str, Any]]] = {}
        self._serial = itertools.count(1)

    def prepare(self, inputs: dict[str, Any], versions: dict[str, str] | None,
                seq: int) -> tuple[dict[str, Any], list[str]]:
        """(descriptor per input, files written for this call only); the caller removes those after the call.

        ``versions`` (handle -> value token) lists every live handle: exports
        of tokens not in it are removed first. Without ``versions`` every input
        is written for this call only. Raises :class:`.transfer_codec.TransferRefused`
        when a value cannot cross (files written so far for this call are removed).
        """
        descs: dict[str, Any] = {}
        written: list[str] = []
        if not inputs and (versions is None or not self._exports):
            return descs, written  # nothing to write, nothing exported to drop (an empty call's usual case)
        if versions is not None:
            self._drop(set(versions.values()))
        try:
            for name, value in inputs.items():
                token = versions.get(name) if versions is not None else None
                if token is not None and token in self._exports:
                    descs[name] = self._exports[token][1]
                    continue
                if token is not None and self.origin is not None:
                    shared = self._link_shared(token, name, value)
                    if shared is not None:
                        descs[name] = shared
                        continue
                self.inputs_written += 1
                desc = write_input(name, value, self.input_dir,
                                   f"v{len(self._exports)}_{seq}" if token is not None else str(seq))
                paths = [os.path.join(self.input_dir, f) for f in input_files(desc)]
                if paths and token is not None:
                    self._exports[token] = (paths, desc)
                else:
                    written.extend(paths)
                descs[name] = desc
        except BaseException:
            for path in written:
                remove_quietly(path)
            raise
        return descs, written

    def export_once(self, token: str, name: str, value: Any) -> tuple[list[str], dict[str, Any]]:
        """(files, descriptor) of the export of ``token``, written now if it was not yet.

        Called by siblings (subagents) with the value they hold under the same
        token, i.e. the same value. Raises ``RuntimeError`` once closed,
        :class:`.transfer_codec.TransferRefused` when the value cannot cross.
        """
        with self.lock:
            if self.closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            if token not in self._exports:
                self.inputs_written += 1
                desc = write_input(name, value, self.input_dir, f"x{next(self._serial)}")
                if not input_files(desc):
                    return [], desc
                self._exports[token] = ([os.path.join(self.input_dir, f) for f in input_files(desc)], desc)
            return self._exports[token]

    def files(self) -> list[str]:
        """Input files kept for later calls (one per live value version that was used, or its parts when large)."""
        with self.lock:
            return sorted(path for paths, _ in self._exports.values() for path in paths)

    def close(self) -> None:
        """Refuse further :meth:`export_once` calls (the directory itself is the owner's to remove)."""
        self.closed = True

    def _drop(self, live: set[str]) -> None:
        for token in [t for t in self._exports if t not in live]:
            paths, _ = self._exports.pop(token)
            for path in paths:
                remove_quietly(path)

    def _link_shared(self, token: str, name: str, value: Any) -> dict[str, Any] | None:
        """Our descriptor for the origin's export of ``token`` (exported there first if needed), or None.

        The file is hard-linked into this input directory: the same inode, no
        byte written, and this worker sees only the inputs it was given. None
        when the origin is closed or the link fails (another file system): the
        caller then exports the value itself.
        """
        try:
            paths, desc = self.origin.export_once(token, name, value)  # type: ignore[union-attr]  # the caller checks that an origin is set
        except RuntimeError:
            return None
        if not paths:
            return desc  # carried inline (tagged JSON): there is no file
        serial = next(self._serial)
        own = [os.path.join(self.input_dir, f"in_s{serial}_{os.path.basename(path)[3:]}") for path in paths]
        try:
            for source, target in zip(paths, own):
                os.link(source, target, follow_symlinks=False)
        except OSError:
            for target in own:
                remove_quietly(target)
            return None
        names = [os.path.basename(path) for path in own]
        desc = {**desc, "file": names[0], **({"parts": names} if len(names) > 1 else {})}
        self._exports[token] = (own, desc)
        return desc
