"""The missing-key record: litellm's answer to "which key does this model lack?", kept so a later kernel answers it without litellm.

A kernel whose model needs an API key the environment lacks used to start the provider host, import litellm
(about 2.5 s of CPU) and only then say "No API key for model ...". The host now writes down each such answer
(:func:`record_refusal`) and a kernel reads it first (:func:`recorded_refusal`). Nothing here lists providers
or their keys: the record holds what litellm's own ``validate_environment`` said and which environment
variables it looked at to say it (:func:`environment_reads` watches ``os.environ`` during the check). The
answer is reused only when it must be the same:

- the same litellm (its installed version, with its own model tables: :data:`LOCAL_TABLES`), the same model
  id, and no ``api_base``, ``api_key`` or ``extra`` given (those change the check or skip it: the caller goes
  the normal way);
- every variable the check looked at is in the same state now (absent, empty or set; values are never
  written down), so a key set since, or an alternative key the check accepts, sends the call to the host.

The record is one small JSON file in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``, then
``harness_magic/provider-keys.json``), written atomically (a private temporary file renamed over it) and
read with limits: a regular file owned by this user, at most :data:`RECORD_MAX_BYTES`, of the exact shape
written (names that are environment variable names, bounded counts and lengths). A file that is anything
else is ignored (the normal way is taken) and replaced at the next write. Reading it never executes
anything; a record names only variables, never their values.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness_magic.core.confinement.owned_dirs import user_cache_folder
from harness_magic.core.confinement.safe_open import read_regular

__all__ = ["KeyRefusal", "EnvironmentReads", "environment_reads", "record_path", "recorded_refusal",
           "record_refusal", "litellm_version", "variable_state", "RECORD_MAX_BYTES", "RECORD_MAX_MODELS",
           "READS_MAX", "MODEL_MAX_CHARS", "RECORD_SCHEMA", "HOST_DEFAULTS", "LOCAL_TABLES"]

RECORD_SCHEMA = 1
"""The record's layout version: a file with another is ignored (and replaced at the next write)."""
RECORD_MAX_BYTES = 64 * 1024
"""A record larger than this is not read: 64 models with their variables take a few kilobytes."""
RECORD_MAX_MODELS = 64
"""Models kept in the record; the oldest answers make room for new ones."""
READS_MAX = 32
"""A check that looked at more variables than this is not recorded (litellm's look at one to three)."""
MODEL_MAX_CHARS = 256
"""Longer model ids are not recorded (nor looked up)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
"""An environment variable name as the record may hold it."""
_ROUTE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")
"""A litellm provider name as the record may hold it."""
_STATES = ("absent", "empty", "set")
HOST_DEFAULTS = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
"""Variables the provider host sets when the kernel's environment lacks them: the host's environment is the
kernel's with these added, so the kernel compares against the same."""
LOCAL_TABLES = ("LITELLM_LOCAL_MODEL_COST_MAP", "True")
"""Answers are recorded and reused only with litellm's own model tables (this variable at this value): tables
fetched at import may differ from one import to the next."""
_SWAP_LOCK = threading.Lock()


@dataclass(frozen=True)
class KeyRefusal:
    """litellm's refusal of ``model`` for want of keys: what it said and what it looked at to say it."""

    model: str
    """The model id as the caller gave it."""
    route: str
    """litellm's provider for the model (what ``check_model_route`` answered)."""
    missing: tuple[str, ...]
    """The variables ``validate_environment`` named as missing, in its order (the error names them)."""
    seen: Mapping[str, str]
    """Each variable the check looked at, and its state then (``absent``, ``empty`` or ``set``)."""

    def holds(self, environ: Mapping[str, str]) -> bool:
        """Whether the check would answer the same in ``environ``: every variable it looked at is as it was."""
        return all(variable_state(environ, name) == state for name, state in self.seen.items())


def variable_state(environ: Mapping[str, str], name: str) -> str:
    """``absent``, ``empty`` or ``set``: what a check can tell of ``name`` without its value."""
    if name not in environ:
        return "absent"
    return "set" if environ[name] else "empty"


class EnvironmentReads(MutableMapping[str, str]):
    """``os.environ`` as a check sees it, noting each variable it looks at (writes go through unchanged);
    ``whole`` is set when it walked the whole environment (nothing then says which variables mattered)."""

    def __init__(self, environ: MutableMapping[str, str]) -> None:
        self._environ = environ
        self.names: set[str] = set()
        self.whole = False

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        return self._environ[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.names.add(name)
        return name in self._environ

    def get(self, name: str, default: Any = None) -> Any:
        self.names.add(name)
        return self._environ.get(name, default)

    def __setitem__(self, name: str, value: str) -> None:
        self._environ[name] = value

    def __delitem__(self, name: str) -> None:
        del self._environ[name]

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._environ)

    def __len__(self) -> int:
        self.whole = True
        return len(self._environ)

    def copy(self) -> dict[str, str]:
        """A plain copy, as ``os.environ.copy()`` gives (the whole environment was read)."""
        self.whole = True
        return dict(self._environ)


@contextlib.contextmanager
def environment_reads() -> Iterator[EnvironmentReads]:
    """``os.environ`` (and so ``os.getenv``) watched for the block's duration; one watched block at a time."""
    with _SWAP_LOCK:
        real = os.environ
        reads = EnvironmentReads(real)
        os.environ = reads  # type: ignore[assignment]  # duck-typed for the block: os.getenv reads os.environ
        try:
            yield reads
        finally:
            os.environ = real


@functools.lru_cache(maxsize=1)
def litellm_version() -> str | None:
    """The installed litellm's version, read from its package metadata (never by importing it) once per
    process (a scan of the installed packages: 4 ms); None when litellm is not installed. A litellm upgraded
    while a kernel runs leaves this the old version: the new host's records then go unused (the normal way)."""
    from importlib import metadata

    try:
        return metadata.version("litellm")
    except metadata.PackageNotFoundError:
        return None


def record_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the record lives for the user whose environment is ``environ`` (default: this process's)."""
    return user_cache_folder(environ) / "provider-keys.json"


def _read(path: Path) -> dict[str, Any] | None:
    """The record's JSON object, or None when it is missing, not a regular file of ours, too large or not JSON."""
    try:
        raw = read_regular(path, RECORD_MAX_BYTES, owned=True)
    except OSError:  # missing, a link, a FIFO or device, another user's, too large: not a record of ours
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # bad UTF-8 is a ValueError; nesting too deep for the parser recurses
        return None
    return data if isinstance(data, dict) else None


def _entry(model: Any, entry: Any) -> KeyRefusal | None:
    """The refusal an entry of the record describes, or None when the entry is not exactly what is written."""
    if not isinstance(model, str) or not 0 < len(model) <= MODEL_MAX_CHARS or not isinstance(entry, dict) \
            or set(entry) != {"route", "missing", "seen"}:
        return None
    route, missing, seen = entry["route"], entry["missing"], entry["seen"]
    if not isinstance(route, str) or not _ROUTE.match(route) or not isinstance(seen, dict) \
            or not 0 < len(seen) <= READS_MAX or not isinstance(missing, list) or not 0 < len(missing) <= READS_MAX:
        return None
    if not all(isinstance(name, str) and _NAME.match(name) and state in _STATES for name, state in seen.items()):
        return None
    if not all(isinstance(name, str) and seen.get(name) in ("absent", "empty") for name in missing):
        return None  # a missing key the check did not see missing: not an answer litellm gave
    return KeyRefusal(model, route, tuple(missing), dict(seen))


def _entries(data: dict[str, Any] | None, version: str) -> dict[str, KeyRefusal]:
    """The record's valid answers for litellm ``version`` (none when the file is another version's or shape's)."""
    if data is None or data.get("schema") != RECORD_SCHEMA or data.get("litellm") != version \
            or not isinstance(data.get("models"), dict) or len(data["models"]) > RECORD_MAX_MODELS:
        return {}
    entries = {}
    for model, entry in data["models"].items():
        refusal = _entry(model, entry)
        if refusal is not None:
            entries[model] = refusal
    return entries


def _host_view(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as the provider host would have it (:data:`HOST_DEFAULTS` added where absent)."""
    return {**HOST_DEFAULTS, **environ}


def recorded_refusal(model: str, environ: Mapping[str, str] | None = None) -> KeyRefusal | None:
    """The recorded refusal of ``model`` when it still holds in ``environ`` (default: this process's) for the
    installed litellm; None in every other case (no record, another litellm, a variable the check looked at
    changed, a record that is not exactly what is written). The caller has checked that no ``api_base``,
    ``api_key`` or ``extra`` applies."""
    if len(model) > MODEL_MAX_CHARS:
        return None
    environ = os.environ if environ is None else environ
    view = _host_view(environ)
    version = litellm_version() if view.get(LOCAL_TABLES[0]) == LOCAL_TABLES[1] else None
    if version is None:
        return None
    refusal = _entries(_read(record_path(environ)), version).get(model)
    if refusal is None or not refusal.holds(view):
        return None
    return refusal


def record_refusal(refusal: KeyRefusal, reads: EnvironmentReads, environ: Mapping[str, str] | None = None) -> bool:
    """Write ``refusal`` (its ``seen`` replaced by what ``reads`` watched, states taken from ``environ``) into
    the record, keeping the other valid answers for this litellm (the newest :data:`RECORD_MAX_MODELS`);
    whether it was written. Not written when the check walked the whole environment or looked at more than
    :data:`READS_MAX` variables, or when the folder cannot be written (the next kernel then asks the host)."""
    environ = os.environ if environ is None else environ
    version = litellm_version()
    if reads.whole or not 0 < len(reads.names) <= READS_MAX or version is None \
            or len(refusal.model) > MODEL_MAX_CHARS or _host_view(environ).get(LOCAL_TABLES[0]) != LOCAL_TABLES[1]:
        return False
    seen = {name: variable_state(environ, name) for name in sorted(reads.names)}
    fresh = _entry(refusal.model, {"route": refusal.route, "missing": list(refusal.missing), "seen": seen})
    if fresh is None:
        return False
    path = record_path(environ)
    entries = _entries(_read(path), version)
    entries.pop(fresh.model, None)
    entries[fresh.model] = fresh  # newest last
    kept = list(entries.values())[-RECORD_MAX_MODELS:]
    data = {"schema": RECORD_SCHEMA, "litellm": version,
            "models": {e.model: {"route": e.route, "missing": list(e.missing), "seen": dict(e.seen)} for e in kept}}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".provider-keys-", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, separators=(",", ":"))
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError:
        return False
    return True
