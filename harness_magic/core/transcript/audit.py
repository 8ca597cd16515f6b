"""The workspace's tamper-evident audit log: an append-only, hash-chained JSONL file.

Separate from the run logs. Every decision that governs data goes here:
approvals, denials, refusals, governed writes (with row counts), masking,
exports and pulls. One JSON object per line::

    {"seq": 1, "ts": "...Z", "kind": "approval", "actor": "ana", ...fields...,
     "prev": "<hash of the previous record, or GENESIS for the first>", "hash": "<sha256>"}

``hash`` is the SHA-256 of the record's canonical JSON (keys sorted, no
spaces, UTF-8) without ``hash`` itself, so it covers ``prev``: changing,
removing or moving any record breaks the chain at that point, and
:func:`verify_file` names the first line where it breaks and why.

Contract of :meth:`AuditLog.append`: the record is written with one
``write`` on an ``O_APPEND`` descriptor and ``fsync``-ed, under an exclusive
``flock`` held while the previous record is read, so writers in several
processes (two kernels in one workspace) keep one valid chain. Records are
bounded (:data:`FIELD_MAX_CHARS`, :data:`RECORD_MAX_BYTES`) and scrubbed of
secrets. Callers pass names, classes and counts, never values of sensitive
columns. A chain whose tail is rewritten consistently from some record on
is not detectable from the file alone; keep a head hash elsewhere
(``verify --head``) to anchor it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import getpass
import hashlib
import json
import math
import os
import re
import stat
import threading
from typing import Any, Callable, Iterator

from harness_magic.core.transcript.scrub import scrub_data

__all__ = [
    "AUDIT_KINDS", "GENESIS", "FIELD_MAX_CHARS", "RECORD_MAX_BYTES", "RESERVED_FIELDS",
    "AuditError", "AuditLog", "Redactor", "Verification", "audit", "canonical", "record_hash",
    "read_tail", "verify_file", "record_decision", "parse_record", "RECORD_MAX_DEPTH", "LINE_MAX_BYTES",
]

AUDIT_KINDS: tuple[str, ...] = ("approval", "denial", "refusal", "governed_write", "masking", "export", "pull")
"""What is audited; an unknown kind is a caller's bug and raises."""

GENESIS = hashlib.sha256(b"harness_magic audit log v1").hexdigest()
"""``prev`` of the first record: the value the chain is anchored to."""

RESERVED_FIELDS = frozenset({"seq", "ts", "kind", "actor", "prev", "hash"})
"""Set by the log itself; a caller passing one of them raises."""

FIELD_MAX_CHARS = 2000
"""A longer string field (a long SQL statement) is cut: the log states decisions, it does not archive payloads."""

LIST_MAX_ITEMS = 200
"""A longer list (column names of a very wide table) is cut, with a marker saying how many were dropped."""

RECORD_MAX_BYTES = 16 * 1024
"""A record stays below this, so reading the last record means reading a bounded tail of the file."""

LINE_MAX_BYTES = RECORD_MAX_BYTES + 1024
"""A line longer than this is not a record the log wrote (``prev`` and ``hash`` are added after the fit): malformed,
and never read whole."""

RECORD_MAX_DEPTH = 16
"""Nesting of a record's JSON (the record itself is level 1): records hold names, lists and small maps. A deeper
line is malformed, found before ``json.loads`` could recurse into ``RecursionError``."""

FILE_MODE = 0o640
"""Created readable by the owner's group (reviewers), writable only by the owner."""

_REQUIRED = ("seq", "ts", "kind", "actor", "prev", "hash")


Redactor = Callable[[str], str]
"""Rewrites a string field before it is recorded (the session passes one that masks sensitive values)."""


class AuditError(Exception):
    """The record cannot be written: a bad kind or field (a bug), or the file cannot be written."""


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes a record's hash covers: sorted keys, no spaces, UTF-8, ``hash`` left out."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 (hex) of :func:`canonical` ``(record)``."""
    return hashlib.sha256(canonical(record)).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _bounded(value: Any, where: str, redact: Redactor | None = None) -> Any:
    """A JSON-compatible copy with long strings and lists cut (strings passed through ``redact``);
    raises AuditError on other types. Nesting is checked before (:func:`_check_depth`)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise AuditError(f"audit field {where} is {value!r}; only finite numbers are recorded")
        return value
    if isinstance(value, str):
        if len(value) > FIELD_MAX_CHARS:
            value = value[:FIELD_MAX_CHARS] + f"…[cut {len(value) - FIELD_MAX_CHARS} chars]"
        return redact(value) if redact is not None else value
    if isinstance(value, (list, tuple)):
        items = [_bounded(v, f"{where}[{i}]", redact) for i, v in enumerate(value[:LIST_MAX_ITEMS])]
        if len(value) > LIST_MAX_ITEMS:
            items.append(f"…[cut {len(value) - LIST_MAX_ITEMS} items]")
        return items
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i == LIST_MAX_ITEMS:
                out["…"] = f"[cut {len(value) - LIST_MAX_ITEMS} entries]"
                break
            key = str(k)[:FIELD_MAX_CHARS]
            out[redact(key) if redact is not None else key] = _bounded(v, f"{where}[{k!r}]", redact)
        return out
    raise AuditError(f"audit field {where} is a {type(value).__name__}; record names, classes and counts "
                     "(str, int, float, bool, None, lists and dicts of them)")


def _check_depth(fields: dict[str, Any]) -> None:
    """AuditError naming the first field that nests deeper than :data:`RECORD_MAX_DEPTH` (walked without recursion)."""
    stack: list[tuple[Any, int, str]] = [(v, 2, k) for k, v in fields.items()]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, (list, tuple, dict)):
            if depth > RECORD_MAX_DEPTH:
                raise AuditError(f"audit field {where[:200]} nests deeper than {RECORD_MAX_DEPTH} levels; record names, "
                                 "classes and counts")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1, where) for item in items)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def _nesting(raw: bytes) -> int:
    """The deepest ``[``/``{`` nesting of the JSON text ``raw`` (strings skipped as JSON skips them), without
    recursion; the cheap count of openers answers first when it cannot exceed the limit."""
    if raw.count(b"[") + raw.count(b"{") <= RECORD_MAX_DEPTH:
        return 0
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b"", raw)):
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:  # readers disagree on which one counts (jq and Python keep the last)
            raise ValueError(f"duplicate key {key[:80]!r}")
        record[key] = value
    return record


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} overflows to {value}")
    return value


def parse_record(raw: bytes) -> dict[str, Any]:
    """One audit line as a JSON object, strictly; ValueError saying why it is not one.

    Refused: a line over :data:`LINE_MAX_BYTES`, nesting deeper than
    :data:`RECORD_MAX_DEPTH` (checked before parsing), a duplicate key in any
    object, ``NaN``/``Infinity`` and numbers that overflow to them, text that is
    not UTF-8 JSON, and any value that is not an object.
    """
    if len(raw) > LINE_MAX_BYTES:
        raise ValueError(f"the line is over {LINE_MAX_BYTES:,} bytes")
    depth = _nesting(raw)
    if depth > RECORD_MAX_DEPTH:
        raise ValueError(f"nested {depth} levels deep (a record nests at most {RECORD_MAX_DEPTH})")
    record = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite)
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not an object")
    return record


def _open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0) -> int:
    """A descriptor for the regular file at ``path``, opened without blocking (a FIFO in the log's place would hang
    the reader or the writer) and, for reading, without following a final link; OSError naming what it is otherwise.

    (:func:`harness_magic.core.confinement.safe_open.open_regular` is the general form; the record plane sits beside
    confinement and cannot import it.)
    """
    nofollow = os.O_NOFOLLOW if flags == os.O_RDONLY else 0
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | nofollow, mode)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a regular file (mode {stat.filemode(info.st_mode)}): {os.fspath(path)}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fit(record: dict[str, Any]) -> dict[str, Any]:
    """Replace the largest caller fields by a marker until the record's line is under RECORD_MAX_BYTES."""
    while len(canonical(record)) + 100 > RECORD_MAX_BYTES:  # + hash field and newline
        sizes = {k: len(json.dumps(v, ensure_ascii=False)) for k, v in record.items() if k not in RESERVED_FIELDS}
        if not sizes:
            break
        largest = max(sizes, key=sizes.__getitem__)
        record[largest] = f"[cut: {sizes[largest]} bytes]"
    return record


def _last_record(fd: int) -> tuple[dict[str, Any] | None, bool]:
    """The last parseable record in the file open as ``fd`` (read under the lock), and whether it ends in a newline."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, True
    start = max(0, size - 2 * RECORD_MAX_BYTES)
    tail = os.pread(fd, size - start, start)
    ends_clean = tail.endswith(b"\n")
    for line in reversed(tail.split(b"\n")):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except ValueError:
            continue  # a torn last write: chain on from the last whole record; verify reports the torn line
        if isinstance(record, dict) and isinstance(record.get("hash"), str) and isinstance(record.get("seq"), int):
            return record, ends_clean
    if start > 0:
        raise AuditError(f"the audit log's last {size - start} bytes hold no whole record; run "
                         "'python -m harness_magic.audit verify' on it and move it aside")
    return None, ends_clean


class AuditLog:
    """One workspace's audit file; safe to share between threads and processes.

    The file is created on the first :meth:`append`, not before.
    """

    def __init__(self, path: str | os.PathLike[str], *, actor: str | None = None,
                 redact: Redactor | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        """Absolute: a later ``os.chdir`` in the kernel does not split the log."""
        self.actor = actor or _os_user()
        self.redact = redact
        """Applied to every string in a record's fields (keys included), after cutting."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AuditLog({self.path!r}, actor={self.actor!r})"

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record chained to the last one; return it. Raises :class:`AuditError`."""
        if kind not in AUDIT_KINDS:
            raise AuditError(f"audit kind {kind!r} is unknown; kinds: {', '.join(AUDIT_KINDS)}")
        reserved = sorted(RESERVED_FIELDS & set(fields))
        if reserved:
            raise AuditError(f"audit fields {', '.join(reserved)} are set by the log; rename them")
        _check_depth(fields)  # before the scrubber, which walks the fields recursively
        body = {k: _bounded(v, k, self.redact) for k, v in scrub_data(fields).items()}
        try:
            with self._lock:
                fd = _open_regular(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    last, ends_clean = _last_record(fd)  # pread ignores O_APPEND's end position
                    record = {"seq": (last["seq"] + 1) if last else 1, "ts": _now(), "kind": kind,
                              "actor": self.actor, **body}
                    record = _fit(record)
                    record["prev"] = last["hash"] if last else GENESIS
                    record["hash"] = record_hash(record)
                    line = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
                    data = ("" if ends_clean else "\n") + line + "\n"
                    os.write(fd, data.encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)  # closing releases the flock
        except OSError as exc:
            raise AuditError(f"cannot write the audit log {self.path}: {exc.strerror or exc}") from exc
        return record

    def tail(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` records (oldest first); unparseable lines are skipped. Empty when there is no file."""
        return read_tail(self.path, n)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        return f"uid:{os.getuid()}"


def audit(sink: AuditLog | None, kind: str, **fields: Any) -> dict[str, Any] | None:
    """``sink.append(kind, **fields)``, or nothing when auditing is off (``sink`` None)."""
    if sink is None:
        return None
    return sink.append(kind, **fields)


def record_decision(sink: AuditLog | None, *, approved: bool, asked: bool, tool: str, connector: str | None,
                    safety: str, summary: str, reason: str, tool_use_id: str | None,
                    **extra: Any) -> dict[str, Any] | None:
    """Audit one approval-policy decision: ``approval`` (by the user if ``asked``, else by policy),
    ``denial`` (a person said no) or ``refusal`` (the policy said no without asking)."""
    kind = "approval" if approved else ("denial" if asked else "refusal")
    fields: dict[str, Any] = {"tool": tool, "connector": connector, "safety": safety, "summary": summary,
                              "reason": reason, "tool_use_id": tool_use_id, **extra}
    if approved:
        fields["by"] = "user" if asked else "policy"
    return audit(sink, kind, **fields)


def read_tail(path: str | os.PathLike[str], n: int) -> list[dict[str, Any]]:
    """The last ``n`` parseable records of the file at ``path`` (oldest first); [] when it does not exist."""
    if n < 1:
        return []
    try:
        with os.fdopen(_open_regular(path), "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - (n + 1) * RECORD_MAX_BYTES)
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first piece may be a partial line
    records = []
    for line in lines:
        try:
            records.append(parse_record(line))
        except ValueError:
            continue
    return records[-n:]


# --------------------------------------------------------------------------- verification


@dataclasses.dataclass(frozen=True)
class Verification:
    """The outcome of :func:`verify_file`."""

    ok: bool
    records: int
    """Whole records read before the first break (all of them when ``ok``)."""
    head: str | None = None
    """Hash of the last good record (None for an empty log)."""
    line: int | None = None
    """1-based line number of the first broken record."""
    problem: str | None = None
    """``edited``, ``deleted``, ``reordered``, ``forged``, ``truncated``, ``malformed`` or ``head``."""
    detail: str = ""

    def message(self, path: str) -> str:
        if self.ok:
            return f"{path}: ok, {self.records} record{'s' if self.records != 1 else ''}, head {self.head or GENESIS}"
        return f"{path}: line {self.line}: {self.problem}: {self.detail}"


def _lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, bytes, ends with newline)`` for each line of the file; a line over :data:`LINE_MAX_BYTES`
    comes as its first ``LINE_MAX_BYTES + 1`` bytes (the rest is skipped unread into memory)."""
    with os.fdopen(_open_regular(path), "rb") as handle:
        number = 0
        while True:
            raw = handle.readline(LINE_MAX_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > LINE_MAX_BYTES and not raw.endswith(b"\n"):
                rest = raw
                while rest and not rest.endswith(b"\n"):
                    rest = handle.readline(LINE_MAX_BYTES)
                yield number, raw, bool(rest)
                continue
            yield number, raw.rstrip(b"\n"), raw.endswith(b"\n")


def _later_seq(path: str, after: int, seq: int) -> int | None:
    """The line number after ``after`` whose record has ``seq`` (a moved record), or None."""
    for number, raw, _ in _lines(path):
        if number <= after:
            continue
        try:
            record = parse_record(raw)
        except ValueError:
            continue
        if record.get("seq") == seq:
            return number
    return None


def verify_file(path: str | os.PathLike[str], *, head: str | None = None) -> Verification:
    """Check the whole chain of the file at ``path``; stop at the first broken record.

    ``head``: a hash noted earlier (the ``head`` a previous verification printed); the
    chain must still contain it, so cutting whole records off the end is found too.
    Raises ``OSError`` when the file cannot be read.
    """
    path = os.fspath(path)
    prev, count, seen_head = GENESIS, 0, head is None
    for number, raw, newline in _lines(path):
        def broken(problem: str, detail: str) -> Verification:
            return Verification(False, count, prev if count else None, number, problem, detail)

        try:
            record = parse_record(raw)
        except ValueError as exc:
            if not newline:
                return broken("truncated", f"the last record is cut off after {len(raw)} bytes ({exc})")
            return broken("malformed", f"not a JSON record ({exc})")
        missing = [k for k in _REQUIRED if k not in record]
        if missing:
            return broken("malformed" if newline else "truncated", f"missing {', '.join(missing)}")
        expected = count + 1
        if record_hash(record) != record["hash"]:
            return broken("edited", "its content no longer matches its hash")
        if record["seq"] != expected:
            seq = record["seq"]
            moved = _later_seq(path, number, expected)
            if moved is not None or (isinstance(seq, int) and seq < expected):
                where = f"; record {expected} is at line {moved}" if moved is not None else ""
                return broken("reordered", f"holds record {seq} where record {expected} belongs{where}")
            if isinstance(seq, int) and seq > expected:
                gap = f"record {expected}" if seq == expected + 1 else f"records {expected}-{seq - 1}"
                return broken("deleted", f"{gap} missing (gap before record {seq})")
            return broken("malformed", f"seq is {seq!r}, expected {expected}")
        if record["prev"] != prev:
            return broken("forged", "its previous-record hash does not match the record before it "
                                    "(this record was inserted, or the one before it rewritten)")
        if not newline:
            return broken("truncated", "the last record has no line end (a write cut short)")
        prev, count = record["hash"], count + 1
        seen_head = seen_head or prev == head
    if not seen_head:
        return Verification(False, count, prev if count else None, count + 1, "head",
                            f"the chain no longer reaches head {head}: records were cut off the end or rewritten")
    return Verification(True, count, prev if count else None)
