"""JSONL run logs, written from the first turn, read back line by line in either version.

One file per run (``<run_dir>/<UTC time>-<run_id>.jsonl``), one JSON object
per line, appended as the run goes — the whole history is never rewritten:

``run_start``
    run id, session id, model, the log's version (``log_version``), the system
    prompt and its SHA-256, every tool's schema and visibility, the history
    the run continues (``history``, or from version 3 a reference to an
    earlier log of the same directory, ``history_from``, plus the messages
    that log does not hold), and the prompt.
``turn``
    one provider call: the messages appended since the previous call
    (``request.messages_appended``), reminders, visible tool names, the
    system prompt's hash, the normalised response, latency, usage (cached
    tokens and cost included), and cache metadata (handles, types, shapes,
    locations — never payloads).
``tools``
    metadata of the tool calls of a turn (name, error flag, duration, handles).
``event``
    harness behaviour worth auditing (connector loads, approvals, verifications).
``compaction``
    the history after it was compacted, recorded whole.
``run_end``
    status, final text, error, totals, and messages appended after the last
    call (the final tool results of a cut-off or interrupted run).
``superseded``
    appended after ``run_end`` when the run's cell was run again
    (:func:`mark_superseded`): the id of the run that replaced it (``by``) and
    the cell's ``run_key``. The run's own records stay as they were.

Versions. A ``run_start`` without ``log_version`` begins a version-1 run (the
logs written before issue 35): every turn repeats the system prompt's hash,
the visible tools, the cache metadata, the model, usage three times (the
response's, the turn's, the cumulative sum) and the provider's raw response
whole. Version 2 (:data:`LOG_VERSION`, what :class:`RunLogger` writes) holds
each thing once:

* the system prompt in full with its hash the first time it appears in the
  file (``run_start``, or a turn whose prompt changed: ``request.system``),
  later only the hash (``request.system_sha256``); the tool schemas once, in
  ``run_start``, and a turn's visible tool names only when they changed;
* messages as deltas: the messages new since the previous call, plus
  ``request.messages_before`` — how many messages the transcript held before
  them — so a missing or moved line is found;
* usage without repeated fields: zero fields, ``total_tokens`` and a turn's
  ``calls: 1`` left out, no cumulative sum (a reader adds the turns up); the
  response's model, and the cache metadata, only when they changed;
* of the provider's raw response only what the normalised response does not
  hold (``provider_extra``: ids, fingerprints, extra usage details...);
* defaults left out: empty reminders, ``is_error: false``, empty handle
  lists, a ``null`` error.

Version 3 (:data:`LOG_VERSION`) is version 2 whose ``run_start`` does not
copy a conversation an earlier log file of the same directory already holds
(a session of N cells wrote O(N²) bytes): ``history_from`` is
``{"run": <run id>, "file": <that log's file name>, "messages": n,
"sha256": <HISTORY_SHA256 of those n messages as logged>}``, and ``history``
holds only the messages after them; when the run referred to started with
the same system prompt, ``system`` is left out (``system_sha256`` names it),
and with the same tools, ``tools`` gives way to ``tools_sha256`` (the
SHA-256 of their JSON with sorted keys). The writer refers to one of the last
runs it closed in the directory (:data:`REFERENCE_CANDIDATES`), the one
whose final transcript shares the longest beginning with the new history;
a history that shares none (compacted, edited by the user, another
conversation) is recorded whole. The reader resolves the reference: only to
an earlier file (its name sorts before the reader's own: no run refers to
itself or to a later one, so references never cycle), a plain name in the
same directory (never a path, a symlink or a hidden file), at most
:data:`HISTORY_MAX_DEPTH` files deep, and checks the digest; a missing or
altered earlier file raises :class:`HistoryReferenceError` naming it. In a
file holding several runs (a ``.jsonl`` export) a reference resolves to an
earlier run of that file first (:func:`portable_lines` writes a run whose
earlier run is not in the export whole).

:func:`iter_log` reads a log of any readable version line by line, in one pass,
and gives every record back in the version-1 shape, so every reader
(replay, retry, diff, exports, evals, the offline replay model) reads old
and new logs alike. A reference a line makes resolves only to an earlier
line of the same file; a hash that names nothing, a text whose hash differs
from the one it is stored under, or a turn that does not follow the
messages before it raises :class:`MalformedLogError` naming the file and
line. A file holding several runs (a ``.jsonl`` export) is read run by run;
a ``history_from`` reference reads the earlier file it names, once.

:func:`reconstruct_transcript` rebuilds the exact message list from a log.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import hashlib
import json
import os
import re
import stat
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from harness_magic.core.transcript.messages import Message, Usage, message_from_dict, message_to_dict
from harness_magic.core.transcript.scrub import scrub

__all__ = ["RunLogger", "read_log", "iter_log", "reconstruct_transcript", "mark_superseded", "system_hash",
           "portable_lines", "history_sha256", "LOG_SUFFIX", "LOG_VERSION", "READABLE_VERSIONS",
           "HISTORY_MAX_DEPTH", "REFERENCE_CANDIDATES", "MalformedLogError", "HistoryReferenceError"]

LOG_SUFFIX = ".jsonl"

LOG_VERSION = 3
"""The version :class:`RunLogger` writes (``run_start.log_version``); absent means 1."""

READABLE_VERSIONS = (1, 2, 3)
"""Versions :func:`iter_log` reads; a newer one is refused by name, never guessed at."""

REFERENCE_VERSION = 3
"""The first version whose ``run_start`` may refer to an earlier log (``history_from``)."""

HISTORY_MAX_DEPTH = 64
"""How many earlier files one log's history may be resolved through (each refers to the one before). The
writer records a history whole rather than go deeper, so a long session starts a new chain every 64 cells;
a reader refuses a deeper chain by name."""

REFERENCE_CANDIDATES = 4
"""Closed runs per log directory the writer keeps in mind to refer to (a session's previous cell, and the
subagent runs that closed after it started)."""

REFERENCE_DIRECTORIES = 16
"""Log directories the writer keeps those runs for (the least recently written to is forgotten first)."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_STAMP_FORMAT = "%Y%m%dT%H%M%S.%f"
"""A log file's name starts with its UTC creation time to the microsecond: a later run's file sorts after."""

_RAW_USAGE_HELD = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
"""Fields of a raw response's usage the normalised usage already holds."""
_RAW_MESSAGE_HELD = frozenset({"role", "content", "tool_calls"})
"""Fields of a raw choice's message the normalised message already holds (content only when it is plain text)."""
_RAW_CHOICE_HELD = frozenset({"index", "finish_reason", "message"})
"""Fields of a raw choice the normalised response already holds (``stop_reason``)."""
_RUN_END_DEFAULTS: dict[str, Any] = {"error": None, "rolled_back": False, "handles": [], "messages_appended": []}
"""``run_end`` fields a version-2 log leaves out when they hold these values."""
_TOOL_RESULT_DEFAULTS: dict[str, Any] = {"is_error": False, "handles": []}
"""Fields of a ``tools`` record's entries a version-2 log leaves out when they hold these values."""


class MalformedLogError(ValueError):
    """A run log line that is not what a log writes: broken JSON, an unknown version, or a reference that
    resolves to nothing or to other content. The message names the file and line."""


class HistoryReferenceError(MalformedLogError):
    """A ``run_start`` whose ``history_from`` cannot be resolved: the earlier log it names is missing, is not an
    earlier plain file of the same directory, lies too deep, or no longer holds the messages it was written
    with (their digest differs). The message names both files."""


def _canonical(value: Any) -> str:
    """The one JSON text of a value whose digest is taken: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _message_digest(message: Any) -> str:
    """SHA-256 of one message as a reader gives it back (:func:`iter_log`, the version-1 shape)."""
    return hashlib.sha256(_canonical(message).encode("utf-8")).hexdigest()


def history_sha256(digests: Iterable[str]) -> str:
    """``history_from.sha256``: SHA-256 of the messages' own digests (:func:`_message_digest`), one a line, so
    the digest of a longer beginning of the same transcript costs only the messages it adds."""
    return hashlib.sha256("".join(d + "\n" for d in digests).encode("ascii")).hexdigest()


@functools.lru_cache(maxsize=16)
def system_hash(system: str) -> str:
    """SHA-256 of the system prompt (memoised: every turn record carries it)."""
    return hashlib.sha256(system.encode("utf-8")).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _dumps(record: dict[str, Any]) -> str:
    """One log line, scrubbed of secrets (:func:`~harness_magic.core.transcript.scrub.scrub`)."""
    return scrub(json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":")))


def _lean_usage(usage: dict[str, Any], *, turn: bool) -> dict[str, Any]:
    """Usage without its zero fields and ``total_tokens`` (a sum); ``calls`` only when not implied (1 in a turn)."""
    implied = 1 if turn else 0
    return {k: v for k, v in usage.items()
            if k != "total_tokens" and (v != implied if k == "calls" else bool(v))}


def _full_usage(usage: Any, *, turn: bool) -> dict[str, Any]:
    """Inverse of :func:`_lean_usage`: the version-1 form (:meth:`Usage.to_dict`)."""
    if not isinstance(usage, dict):
        raise TypeError(f"usage is {type(usage).__name__}, not an object")
    full = Usage.from_dict(usage)
    if turn and "calls" not in usage:
        full = Usage(full.input_tokens, full.output_tokens, full.cached_tokens, full.cost, calls=1)
    return full.to_dict()


def _lean_messages(messages: Any) -> Any:
    """Messages in their JSON form without a tool result's ``is_error: false`` (the default)."""
    if not isinstance(messages, list):
        return messages
    return [{**m, "content": [{k: v for k, v in b.items() if not (k == "is_error" and v is False)}
                              if isinstance(b, dict) and b.get("type") == "tool_result" else b
                              for b in m["content"]]}
            if isinstance(m, dict) and isinstance(m.get("content"), list) else m for m in messages]


def _full_messages(messages: Any, where: str) -> list[Any]:
    """Inverse of :func:`_lean_messages`; a value that is not a list of messages raises naming ``where``."""
    if not isinstance(messages, list):
        raise ValueError(f"{where} is {type(messages).__name__}, not a list of messages")
    return [{**m, "content": [{**b, "is_error": b.get("is_error", False)}
                              if isinstance(b, dict) and b.get("type") == "tool_result" else b
                              for b in m["content"]]}
            if isinstance(m, dict) and isinstance(m.get("content"), list) else m for m in messages]


def _tool_uses(message: Any) -> dict[str, Any]:
    """Tool use id -> tool name of a message in its JSON form."""
    content = message.get("content") if isinstance(message, dict) else None
    return {b["id"]: b.get("name") for b in content or () if isinstance(b, dict) and b.get("type") == "tool_use"
            and isinstance(b.get("id"), str)} if isinstance(content, list) else {}


def _pruned(value: Any) -> Any:
    """``value`` without empty, null, zero or false leaves (they say nothing the normalised response lacks)."""
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if k == "index" or v not in (None, "", 0, False, [], {})}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _raw_extra(raw: Any, model: Any) -> dict[str, Any]:
    """What a provider's raw response holds beyond the normalised one (ids, fingerprints, usage details)."""
    if not isinstance(raw, dict):
        return {"raw": raw} if raw else {}
    extra = {k: v for k, v in raw.items() if k not in ("choices", "usage") and not (k == "model" and v == model)}
    choices = []
    for index, choice in enumerate(raw.get("choices") or ()):
        if not isinstance(choice, dict):
            choices.append(choice)
            continue
        kept = {k: v for k, v in choice.items() if k not in _RAW_CHOICE_HELD}
        message = choice.get("message")
        if isinstance(message, dict):
            rest = {k: v for k, v in message.items()
                    if k not in _RAW_MESSAGE_HELD or (k == "content" and not isinstance(v, (str, type(None))))}
            if _pruned(rest):
                kept["message"] = rest
        if _pruned(kept):
            choices.append({"index": choice.get("index", index), **kept})
    if choices:
        extra["choices"] = choices
    usage = raw.get("usage")
    if isinstance(usage, dict):
        rest = {k: v for k, v in usage.items() if k not in _RAW_USAGE_HELD}
        details = rest.get("prompt_tokens_details")
        if isinstance(details, dict):
            rest["prompt_tokens_details"] = {k: v for k, v in details.items() if k != "cached_tokens"}
        extra["usage"] = rest
    return _pruned(extra)


def _value_digest(value: Any) -> str:
    """SHA-256 of a value as a reader gives it back (``tools_sha256``)."""
    return hashlib.sha256(_canonical(value).encode("utf-8")).hexdigest()


def _logged_value_digest(value: Any) -> str:
    """:func:`_value_digest` of a value as a reader will give it back: written and scrubbed as its line is."""
    return _value_digest(json.loads(scrub(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))))


def _logged_digest(message: Any) -> str:
    """The digest of a message as a reader will give it back: written lean and scrubbed as its line is, read back."""
    text = scrub(json.dumps(_lean_messages([message]), ensure_ascii=False, default=str, separators=(",", ":")))
    return _message_digest(_full_messages(json.loads(text), "a logged message")[0])


def _shared_beginning(earlier: Sequence[Any], history: Sequence[Any]) -> int:
    """How many messages ``history`` begins with that ``earlier`` begins with too."""
    count = 0
    for old, new in zip(earlier, history):
        if old is not new and old != new:
            break
        count += 1
    return count


def _regular_file(path: Path) -> bool:
    """True for a regular file that is not a link (what a log directory's run logs are)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class _Closed:
    """A run log this process wrote to its end: its final transcript, for a later run of the directory to refer to."""

    path: Path
    run_id: str
    messages: list[Any]
    """The transcript's messages as handed to :meth:`RunLogger.write` (compared with a later run's history)."""
    digests: list[str | None]
    """Each message's digest as logged (:func:`_logged_digest`), taken when a later run first needs it."""
    depth: int
    """Earlier files a reader goes through to resolve this log's history (0: recorded whole)."""
    system_sha256: str
    """The hash of the system prompt the run started with, as logged."""
    tools: list[Any]
    """The tools the run started with, as handed over (compared with a later run's)."""
    tools_digest: str | None = None
    """:func:`_logged_value_digest` of ``tools``, taken when a later run first needs it."""

    def tools_sha256(self) -> str:
        if self.tools_digest is None:
            self.tools_digest = _logged_value_digest(self.tools)
        return self.tools_digest

    def digest(self, index: int) -> str:
        found = self.digests[index]
        if found is None:
            found = self.digests[index] = _logged_digest(self.messages[index])
        return found


_CLOSED: "OrderedDict[str, deque[_Closed]]" = OrderedDict()
"""Log directory -> the last :data:`REFERENCE_CANDIDATES` runs closed in it, latest last."""
_CLOSED_LOCK = threading.Lock()


def _remember(closed: _Closed) -> None:
    key = os.path.abspath(closed.path.parent)
    with _CLOSED_LOCK:
        runs = _CLOSED.pop(key, None) or deque(maxlen=REFERENCE_CANDIDATES)
        runs.append(closed)
        _CLOSED[key] = runs
        while len(_CLOSED) > REFERENCE_DIRECTORIES:
            _CLOSED.popitem(last=False)


def _closed_in(directory: Path) -> list[_Closed]:
    """The runs closed in ``directory`` that a new run may refer to, latest first."""
    with _CLOSED_LOCK:
        return list(reversed(_CLOSED.get(os.path.abspath(directory), ())))


class _LeanWriter:
    """The state a version-3 writer keeps to hold each thing once (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.transcript: list[Any] = []
        """The messages a reader reconstructs from the lines written so far, as handed over."""
        self.digests: list[str | None] = []
        """Digests of ``transcript``'s messages known from the run referred to (the others: None)."""
        self.depth = 0
        """Earlier files a reader goes through to resolve this log's history."""
        self.start_system = ""
        """The hash of the system prompt in ``run_start`` (as logged)."""
        self.start_tools: list[Any] = []
        """The tools in ``run_start``, as handed over."""
        self.systems: set[str] = set()
        self.messages = 0
        self.visible: Any = None
        self.model: Any = None
        self.cache: Any = None
        self.uses: dict[str, Any] = {}
        """Tool use id -> name, of the latest turn's response: a ``tools`` record need not repeat the name."""

    def system(self, text: str) -> tuple[str, str]:
        """The text as the log holds it (scrubbed) and its hash."""
        written = scrub(text)
        return written, system_hash(written)

    def run_start(self, fields: dict[str, Any]) -> dict[str, Any]:
        written, digest = self.system(fields["system"])
        self.systems.add(digest)
        history = list(fields.get("history") or ())
        self.messages = len(history)
        self.start_system, self.start_tools = digest, list(fields.get("tools") or ())
        out = {"log_version": LOG_VERSION, **fields, "system": written, "system_sha256": digest}
        found = self.reference(history)
        if found is None:
            self.transcript, self.digests, self.depth = history, [None] * len(history), 0
            out["history"] = _lean_messages(history)
            return out
        closed, count, reference = found
        # the messages shared are the closed run's own objects (equal): the runs kept in mind share them
        self.transcript, self.depth = closed.messages[:count] + history[count:], closed.depth + 1
        self.digests = closed.digests[:count] + [None] * (len(history) - count)
        out["history"] = _lean_messages(history[count:])
        out["history_from"] = reference
        if closed.system_sha256 == digest:  # the reader takes the text from the run referred to
            del out["system"]
        if "tools" in out and closed.tools == out["tools"]:
            try:
                out["tools_sha256"] = closed.tools_sha256()
            except ValueError:  # tools the log's scrubbing cannot round-trip: written whole
                return out
            del out["tools"]
        return out

    def reference(self, history: list[Any]) -> tuple[_Closed, int, dict[str, Any]] | None:
        """The closed run of this directory whose transcript shares the longest beginning with ``history``, that
        beginning's length and the ``history_from`` naming it; None when no earlier file shares any."""
        best: tuple[_Closed, int] | None = None
        for closed in _closed_in(self.path.parent):
            if closed.depth >= HISTORY_MAX_DEPTH or not closed.path.name < self.path.name:
                continue  # too deep for a reader, or not earlier (a reader refers only to an earlier file)
            count = _shared_beginning(closed.messages, history)
            if count and (best is None or count > best[1]):
                best = (closed, count)
        if best is None or not _regular_file(best[0].path):  # deleted or replaced since: the history goes whole
            return None
        closed, count = best
        try:
            digest = history_sha256(closed.digest(index) for index in range(count))
        except ValueError:  # a message the log's scrubbing cannot round-trip: recorded whole, never misreferred
            return None
        return closed, count, {"run": closed.run_id, "file": closed.path.name, "messages": count, "sha256": digest}

    def closed(self, path: Path, run_id: str) -> _Closed:
        """What a later run of the directory may refer to, once this log's ``run_end`` is written."""
        return _Closed(Path(os.path.abspath(path)), run_id, self.transcript, self.digests, self.depth,
                       self.start_system, self.start_tools)

    def _extend(self, messages: Sequence[Any]) -> None:
        self.transcript.extend(messages)
        self.digests.extend([None] * len(messages))

    def turn(self, fields: dict[str, Any]) -> dict[str, Any]:
        request = dict(fields["request"])
        text = request.pop("system", None)
        if text is not None:
            written, digest = self.system(text)
            if digest not in self.systems:  # first appearance in this file: in full, with its hash
                request["system"] = written
                self.systems.add(digest)
            request["system_sha256"] = digest
        if request.get("visible_tools") == self.visible:
            request.pop("visible_tools", None)
        else:
            self.visible = request.get("visible_tools")
        if not request.get("reminders"):
            request.pop("reminders", None)
        request["messages_before"] = self.messages
        self.messages += len(request.get("messages_appended") or ()) + 1
        self._extend([*(request.get("messages_appended") or ()), fields["response"].get("message")])
        request["messages_appended"] = _lean_messages(request.get("messages_appended") or [])
        response = {k: v for k, v in fields["response"].items() if k != "usage" and v is not None}
        self.uses = _tool_uses(response.get("message"))
        if response.get("model") == self.model:
            response.pop("model", None)
        else:
            self.model = response.get("model")
        out = {k: v for k, v in fields.items() if k not in ("provider_response", "cumulative_usage", "cache")}
        out.update(request=request, response=response, usage=_lean_usage(fields.get("usage") or {}, turn=True))
        extra = _raw_extra(fields.get("provider_response"), self.model)
        if extra:
            out["provider_extra"] = extra
        if "cache" in fields and fields["cache"] != self.cache:
            out["cache"] = self.cache = fields["cache"]
        return out

    def tools(self, fields: dict[str, Any]) -> dict[str, Any]:
        results = [{k: v for k, v in r.items() if not (k in _TOOL_RESULT_DEFAULTS and v == _TOOL_RESULT_DEFAULTS[k])
                    and not (k == "name" and self.uses.get(r.get("tool_use_id")) == v)}
                   for r in fields.get("results") or ()]
        return {**fields, "results": results}

    def compaction(self, fields: dict[str, Any]) -> dict[str, Any]:
        self.messages = len(fields.get("history") or ())
        self.transcript, self.digests = [], []
        self._extend(fields.get("history") or ())
        return {**fields, "history": _lean_messages(fields.get("history") or [])}

    def run_end(self, fields: dict[str, Any]) -> dict[str, Any]:
        self.messages += len(fields.get("messages_appended") or ())
        self._extend(fields.get("messages_appended") or ())
        fields = {**fields, "messages_appended": _lean_messages(fields.get("messages_appended") or [])}
        out = {k: v for k, v in fields.items() if not (k in _RUN_END_DEFAULTS and v == _RUN_END_DEFAULTS[k])}
        for key in ("usage", "subagent_usage"):
            if isinstance(out.get(key), dict):
                out[key] = _lean_usage(out[key], turn=False)
        return out


class RunLogger:
    """Appends the records of one run to its own JSONL file, in version :data:`LOG_VERSION`.

    :meth:`write` takes every record in the version-1 shape (what :func:`iter_log` gives back) and writes it
    lean; a ``turn``'s request may pass the system prompt's text (``system``) instead of its hash.
    """

    def __init__(self, run_dir: str | os.PathLike[str], run_id: str) -> None:
        directory = Path(run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime(_STAMP_FORMAT)
        self.run_id = run_id
        self.path = directory / f"{stamp}-{run_id}{LOG_SUFFIX}"
        self._file = open(self.path, "a", encoding="utf-8")
        self._lean = _LeanWriter(self.path)
        self._ended = False
        """True once ``run_end`` is written whole: only then may a later run refer to this log."""

    def write(self, record_type: str, **fields: Any) -> None:
        lean = getattr(self._lean, record_type, None) if record_type in _LEAN_TYPES else None
        record = {"type": record_type, "run_id": self.run_id, "time": _now(), **(lean(fields) if lean else fields)}
        self._file.write(_dumps(record) + "\n")
        self._file.flush()
        if record_type == "run_end":
            self._ended = True

    def start(
        self,
        *,
        session_id: str | None,
        model: str,
        system: str,
        tools: Sequence[Any],
        history: Sequence[Message],
        prompt: str | None,
        max_turns: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.write(
            "run_start",
            session_id=session_id,
            model=model,
            system=system,
            tools=[{**t.schema(), "visible": t.visible, "safety": t.safety, "connector": t.connector} for t in tools],
            history=[message_to_dict(m) for m in history],
            prompt=prompt,
            max_turns=max_turns,
            **(extra or {}),
        )

    def close(self) -> None:
        """Close the file; a log whose ``run_end`` was written becomes one a later run of the directory may refer
        to (``history_from``)."""
        if not self._file.closed:
            self._file.close()
            if self._ended:
                _remember(self._lean.closed(self.path, self.run_id))


_LEAN_TYPES = frozenset({"run_start", "turn", "tools", "compaction", "run_end"})
"""Record types :class:`_LeanWriter` writes leaner; the others are written as given."""


def mark_superseded(path: str | os.PathLike[str], run_id: str, *, by: str, run_key: str | None) -> None:
    """Append a ``superseded`` record to the finished run log at ``path``: run ``by`` replaced it."""
    record = {"type": "superseded", "run_id": run_id, "time": _now(), "by": by, "run_key": run_key}
    with open(path, "a", encoding="utf-8") as file:
        file.write(_dumps(record) + "\n")


class _Reader:
    """Gives version-2 and -3 records back in the version-1 shape, one run of a file at a time."""

    def __init__(self, resolve: Callable[[Any], tuple["_Ended", list[Any]]]) -> None:
        self.resolve = resolve
        """Resolves a ``history_from`` to the messages it names (:func:`_resolve`)."""
        self.run_id: Any = None
        self.start_system: Any = None
        """The system prompt's text in ``run_start`` (given, or taken from the run referred to)."""
        self.start_tools: Any = None
        self.transcript: list[Any] = []
        """The messages the lines read so far hold (versions 2 and 3), for a later run of the file to refer to."""
        self.version = 1
        self.systems: dict[str, str] = {}
        self.system: str | None = None
        self.messages = 0
        self.visible: Any = None
        self.model: Any = None
        self.cache: Any = []
        self.usage = Usage()
        self.uses: dict[str, Any] = {}

    def read(self, record: dict[str, Any]) -> dict[str, Any]:
        kind = record.get("type")
        if kind == "run_start":
            return self.run_start(record)
        if self.version == 1:
            return record
        handler = {"turn": self.turn, "tools": self.tools, "compaction": self.compaction,
                   "run_end": self.run_end}.get(str(kind))
        return handler(record) if handler is not None else record

    def run_start(self, record: dict[str, Any]) -> dict[str, Any]:
        version = record.get("log_version", 1)
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ValueError(f"log_version {version!r} is not one this reader knows "
                             f"({', '.join(map(str, READABLE_VERSIONS))})")
        self.version = version
        self.run_id = record.get("run_id")
        if version == 1:
            return record
        history = _full_messages(record.get("history", []), "run_start history")
        out = {**record}
        if version < REFERENCE_VERSION and ({"history_from", "tools_sha256"} & set(record)):
            raise ValueError(f"history_from and tools_sha256 are not fields of a version-{version} log")
        if "history_from" in record:
            ended, prefix = self.resolve(out.pop("history_from"))
            history = prefix + history
            if "system" not in record:  # the system prompt of the run referred to, when its hash is this one's
                if ended.system is None or system_hash(ended.system) != record.get("system_sha256"):
                    raise HistoryReferenceError(f"run_start holds no system prompt and system_sha256 "
                                                f"{_shown(record.get('system_sha256'))} is not the hash of the one "
                                                "of the run it refers to")
                out["system"] = ended.system
            if "tools_sha256" in record:
                if ended.tools is None or _value_digest(ended.tools) != record["tools_sha256"]:
                    raise HistoryReferenceError(f"tools_sha256 {_shown(record['tools_sha256'])} is not the hash of "
                                                "the tools of the run it refers to")
                out["tools"] = ended.tools
                del out["tools_sha256"]
        elif "tools_sha256" in record:
            raise ValueError("tools_sha256 without history_from: no earlier run holds the tools")
        self.system = self.remember_system(out.get("system"), out.get("system_sha256"), "run_start")
        self.start_system, self.start_tools = out.get("system"), out.get("tools")
        self.messages = len(history)
        self.transcript = list(history)
        out["history"] = history
        return out

    def remember_system(self, text: Any, digest: Any, where: str) -> str:
        if not isinstance(text, str) or not isinstance(digest, str):
            raise ValueError(f"{where} holds no system prompt with its system_sha256")
        if system_hash(text) != digest:
            raise ValueError(f"{where}: system_sha256 {digest[:16]!r}… is not the hash of the system prompt stored "
                             f"under it (that text hashes to {system_hash(text)[:16]!r}…)")
        self.systems[digest] = text
        return digest

    def turn(self, record: dict[str, Any]) -> dict[str, Any]:
        request = dict(record["request"])
        number = record.get("turn")
        if "system" in request:
            self.system = self.remember_system(request.pop("system"), request.get("system_sha256"), f"turn {number}")
        elif "system_sha256" in request:
            digest = request["system_sha256"]
            if digest not in self.systems:
                raise ValueError(f"turn {number}: system_sha256 {str(digest)[:16]!r}… refers to no system prompt "
                                 "earlier in this file")
            self.system = digest
        request["system_sha256"] = self.system
        if "visible_tools" in request:
            self.visible = request["visible_tools"]
        request["visible_tools"] = self.visible
        request.setdefault("reminders", [])
        appended = request["messages_appended"] = _full_messages(request["messages_appended"],
                                                                 f"turn {number} messages_appended")
        before = request.get("messages_before")
        if before != self.messages:
            raise ValueError(f"turn {number} follows {before!r} messages, but the lines before it hold "
                             f"{self.messages} (a line is missing, moved or edited)")
        self.messages += len(appended) + 1
        response = dict(record["response"])
        response["message"] = _full_messages([response["message"]], f"turn {number} response message")[0]
        self.transcript += [*appended, response["message"]]
        self.uses = _tool_uses(response["message"])
        if "model" in response:
            self.model = response["model"]
        usage = _full_usage(record.get("usage") or {}, turn=True)
        self.usage = self.usage + Usage.from_dict(usage)
        if "cache" in record:
            self.cache = record["cache"]
        response.update(usage=usage, model=self.model, stop_reason=response.get("stop_reason"))
        out = {k: v for k, v in record.items() if k != "provider_extra"}
        out.update(request=request, response=response, provider_response=record.get("provider_extra") or {},
                   usage=usage, cumulative_usage=self.usage.to_dict(), cache=self.cache)
        return out

    def tools(self, record: dict[str, Any]) -> dict[str, Any]:
        results = []
        for entry in record.get("results") or ():
            if "name" not in entry:  # the name of the tool use it answers, in the turn before it
                if entry.get("tool_use_id") not in self.uses:
                    raise ValueError(f"tool_use_id {entry.get('tool_use_id')!r} answers no tool use of the turn "
                                     "before it")
                entry = {**entry, "name": self.uses[entry["tool_use_id"]]}
            results.append({**copy.deepcopy(_TOOL_RESULT_DEFAULTS), **entry})
        return {**record, "results": results}

    def compaction(self, record: dict[str, Any]) -> dict[str, Any]:
        history = _full_messages(record["history"], "compaction history")
        self.messages = len(history)
        self.transcript = list(history)
        return {**record, "history": history}

    def run_end(self, record: dict[str, Any]) -> dict[str, Any]:
        out = {**copy.deepcopy(_RUN_END_DEFAULTS), **record}
        out["messages_appended"] = _full_messages(out["messages_appended"], "run_end messages_appended")
        self.transcript += out["messages_appended"]
        for key in ("usage", "subagent_usage"):
            if key in out:
                out[key] = _full_usage(out[key], turn=False)
        return out


def iter_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of a log file of any readable version, one line at a time, in the version-1 shape.

    One pass: a reference resolves to an earlier line already read, never by reading the file again; a
    ``history_from`` reads the earlier file it names (and the ones that one refers to), each once.
    ``FileNotFoundError`` for a missing file; :class:`MalformedLogError` naming the file and line for a line
    that is not JSON, not an object, or not a record a log writes, and :class:`HistoryReferenceError` for a
    history that cannot be resolved (see the module's docstring).
    """
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"run log not found: {file}")
    yield from _records(file, 0, {})


@dataclass(frozen=True)
class _Ended:
    """What a later run may take from a run it refers to: its final transcript, system prompt and tools."""

    transcript: list[Any]
    system: Any
    tools: Any


def _records(file: Path, depth: int, finished: dict[str, _Ended]) -> Iterator[dict[str, Any]]:
    """:func:`iter_log` of ``file`` read ``depth`` references deep; ``finished`` gets each run's end (versions 2
    and 3) by run id as the run ends, for a later run of the file to refer to."""

    def resolve(reference: Any) -> tuple[_Ended, list[Any]]:
        return _resolve(file, depth, finished, reference)

    reader = _Reader(resolve)
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise MalformedLogError(f"{file}:{number}: not a JSON record ({exc})") from None
            if not isinstance(record, dict):
                raise MalformedLogError(f"{file}:{number}: not a JSON record (a {type(record).__name__})")
            if record.get("type") == "run_start":
                _finish(reader, finished)
                reader = _Reader(resolve)  # a new run in the same file (an export of several runs): its own state
            try:
                yield reader.read(record)
            except HistoryReferenceError as exc:
                raise HistoryReferenceError(f"{file}:{number}: {exc}") from None
            except MalformedLogError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a field missing or of a wrong type
                detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
                raise MalformedLogError(f"{file}:{number}: malformed {record.get('type')!r} record: {detail}") from None
    _finish(reader, finished)


def _finish(reader: _Reader, finished: dict[str, _Ended]) -> None:
    if reader.version >= 2 and isinstance(reader.run_id, str):
        finished[reader.run_id] = _Ended(reader.transcript, reader.start_system, reader.start_tools)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _resolve(file: Path, depth: int, finished: dict[str, _Ended], reference: Any) -> tuple[_Ended, list[Any]]:
    """The run a ``history_from`` of ``file`` names and the messages it takes from it, checked against their
    digest; HistoryReferenceError naming what is wrong otherwise (see the module's docstring)."""
    if not isinstance(reference, dict):
        raise HistoryReferenceError(f"history_from is {_shown(reference)}, not an object naming an earlier run")
    run, count, digest = reference.get("run"), reference.get("messages"), reference.get("sha256")
    if not isinstance(run, str) or not run:
        raise HistoryReferenceError(f"history_from names no run (run {_shown(run)})")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise HistoryReferenceError(f"history_from messages {_shown(count)} is not a count of 1 or more")
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest):
        raise HistoryReferenceError(f"history_from sha256 {_shown(digest)} is not a SHA-256 in hex")
    if run in finished:  # an earlier run of this file (an export)
        ended, where = finished[run], f"run {run} earlier in this file"
    else:
        target = _earlier_file(file, reference.get("file"), run)
        if depth >= HISTORY_MAX_DEPTH:
            raise HistoryReferenceError(f"history_from goes deeper than {HISTORY_MAX_DEPTH} earlier files "
                                        f"(HISTORY_MAX_DEPTH) at {target.name!r}")
        ended, where = _final_transcript(target, run, depth + 1), f"run {run} of {target}"
    messages = ended.transcript
    if count > len(messages):
        raise HistoryReferenceError(f"history_from counts {count} messages, but {where} ends with {len(messages)}")
    prefix = messages[:count]
    found = history_sha256(_message_digest(m) for m in prefix)
    if found != digest:
        raise HistoryReferenceError(f"the first {count} messages of {where} hash to {found[:16]}…, not to the "
                                    f"sha256 this run recorded ({digest[:16]}…): that log was altered since")
    return ended, prefix


def _earlier_file(file: Path, name: Any, run: str) -> Path:
    """The log ``name`` refers to: a plain file name of ``file``'s directory that sorts before ``file``'s own."""
    if not isinstance(name, str) or not name.endswith(LOG_SUFFIX) or os.path.basename(name) != name \
            or name.startswith(".") or "\\" in name or "\x00" in name or len(name) > 255:
        raise HistoryReferenceError(f"history_from file {_shown(name)} is not the name of a log in the same "
                                    f"directory (a plain file name ending in {LOG_SUFFIX})")
    if not name < file.name:
        raise HistoryReferenceError(f"history_from file {name!r} is not an earlier log than {file.name!r} (a run "
                                    "refers only to a log written before it)")
    target = file.parent / name
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        raise HistoryReferenceError(f"this run continues run {run} of {target}, which is missing (deleted or "
                                    "moved): its history cannot be read without it") from None
    except OSError as exc:
        raise HistoryReferenceError(f"this run continues run {run} of {target}, which cannot be read: {exc}") \
            from None
    if not stat.S_ISREG(mode):
        raise HistoryReferenceError(f"history_from file {target} is not a regular file (a link or a directory "
                                    "is never followed)")
    return target


def _final_transcript(target: Path, run: str, depth: int) -> _Ended:
    """How run ``run`` of the log ``target`` ends (its references resolved, ``depth`` deep)."""
    finished: dict[str, _Ended] = {}
    try:
        for _ in _records(target, depth, finished):
            pass
    except (MalformedLogError, OSError, UnicodeDecodeError) as exc:
        raise HistoryReferenceError(f"this run continues run {run} of {target}, which cannot be read: {exc}") \
            from None
    if run not in finished:
        raise HistoryReferenceError(f"history_from names run {run!r}, which {target} does not hold")
    return finished[run]


def portable_lines(path: str | os.PathLike[str], earlier_runs: set[str]) -> Iterator[str]:
    """The lines of the log at ``path`` for a file that holds it after the runs ``earlier_runs`` (a ``.jsonl``
    export of several runs), each ending in a newline: as written, except a ``run_start`` whose
    ``history_from`` names a run not in ``earlier_runs``, which is written with its history whole (resolved
    and checked: :class:`HistoryReferenceError` when it cannot be). Each run id of the file is added to
    ``earlier_runs`` as its ``run_start`` goes by, so a later run of the export may refer to it."""
    file = Path(path)
    starts = 0
    resolved: list[dict[str, Any]] | None = None
    with open(file, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line) if '"run_start"' in line else None
            except (ValueError, RecursionError):  # not a record: copied as it is, like every other line
                record = None
            if not isinstance(record, dict) or record.get("type") != "run_start":
                yield line if line.endswith("\n") else line + "\n"
                continue
            starts += 1
            reference = record.get("history_from")
            if isinstance(reference, dict) and reference.get("run") not in earlier_runs:
                if resolved is None:
                    resolved = [r for r in iter_log(file) if r.get("type") == "run_start"]
                start = resolved[starts - 1]
                whole = {**record, "system": start["system"], "tools": start["tools"],
                         "history": _lean_messages(start["history"])}
                for key in ("history_from", "tools_sha256"):
                    whole.pop(key, None)
                line = _dumps(whole) + "\n"
            if isinstance(record.get("run_id"), str):
                earlier_runs.add(record["run_id"])
            yield line if line.endswith("\n") else line + "\n"


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a log file (:func:`iter_log`); a clear error for a missing or broken file."""
    return list(iter_log(path))


def reconstruct_transcript(path: str | os.PathLike[str]) -> list[Message]:
    """The exact message list at the end of the run the log describes."""
    messages: list[Message] = []
    for record in iter_log(path):
        kind = record.get("type")
        if kind == "run_start":
            messages = [message_from_dict(m) for m in record.get("history", [])]
        elif kind == "turn":
            messages.extend(message_from_dict(m) for m in record["request"]["messages_appended"])
            messages.append(message_from_dict(record["response"]["message"]))
        elif kind == "compaction":  # the history was compacted: it is recorded whole
            messages = [message_from_dict(m) for m in record["history"]]
        elif kind == "run_end":
            messages.extend(message_from_dict(m) for m in record.get("messages_appended", []))
    return messages
