"""JSONL run logs, written from the first turn, read back line by line in either version.

One file per run (``<run_dir>/<UTC time>-<run_id>.jsonl``), one JSON object
per line, appended as the run goes — the whole history is never rewritten:

``run_start``
    run id, session id, model, the log's version (``log_version``), the system
    prompt and its SHA-256, every tool's schema and visibility, the history
    the run continues (``history``), and the prompt.
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

:func:`iter_log` reads a log of either version line by line, in one pass,
and gives every record back in the version-1 shape, so every reader
(replay, retry, diff, exports, evals, the offline replay model) reads old
and new logs alike. A reference a line makes resolves only to an earlier
line of the same file; a hash that names nothing, a text whose hash differs
from the one it is stored under, or a turn that does not follow the
messages before it raises :class:`MalformedLogError` naming the file and
line. A file holding several runs (a ``.jsonl`` export) is read run by run.

:func:`reconstruct_transcript` rebuilds the exact message list from a log.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness_magic.core.transcript.messages import Message, Usage, message_from_dict, message_to_dict
from harness_magic.core.transcript.scrub import scrub

__all__ = ["RunLogger", "read_log", "iter_log", "reconstruct_transcript", "mark_superseded", "system_hash",
           "LOG_SUFFIX", "LOG_VERSION", "READABLE_VERSIONS", "MalformedLogError"]

LOG_SUFFIX = ".jsonl"

LOG_VERSION = 2
"""The version :class:`RunLogger` writes (``run_start.log_version``); absent means 1."""

READABLE_VERSIONS = (1, 2)
"""Versions :func:`iter_log` reads; a newer one is refused by name, never guessed at."""

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


class _LeanWriter:
    """The state a version-2 writer keeps to hold each thing once (see the module's docstring)."""

    def __init__(self) -> None:
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
        self.messages = len(fields.get("history") or ())
        return {"log_version": LOG_VERSION, **fields, "system": written, "system_sha256": digest,
                "history": _lean_messages(fields.get("history") or [])}

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
        return {**fields, "history": _lean_messages(fields.get("history") or [])}

    def run_end(self, fields: dict[str, Any]) -> dict[str, Any]:
        self.messages += len(fields.get("messages_appended") or ())
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
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.run_id = run_id
        self.path = directory / f"{stamp}-{run_id}{LOG_SUFFIX}"
        self._file = open(self.path, "a", encoding="utf-8")
        self._lean = _LeanWriter()

    def write(self, record_type: str, **fields: Any) -> None:
        lean = getattr(self._lean, record_type, None) if record_type in _LEAN_TYPES else None
        record = {"type": record_type, "run_id": self.run_id, "time": _now(), **(lean(fields) if lean else fields)}
        self._file.write(_dumps(record) + "\n")
        self._file.flush()

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
        if not self._file.closed:
            self._file.close()


_LEAN_TYPES = frozenset({"run_start", "turn", "tools", "compaction", "run_end"})
"""Record types :class:`_LeanWriter` writes leaner; the others are written as given."""


def mark_superseded(path: str | os.PathLike[str], run_id: str, *, by: str, run_key: str | None) -> None:
    """Append a ``superseded`` record to the finished run log at ``path``: run ``by`` replaced it."""
    record = {"type": "superseded", "run_id": run_id, "time": _now(), "by": by, "run_key": run_key}
    with open(path, "a", encoding="utf-8") as file:
        file.write(_dumps(record) + "\n")


class _Reader:
    """Gives version-2 records back in the version-1 shape, one run of a file at a time."""

    def __init__(self) -> None:
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
        if version == 1:
            return record
        self.system = self.remember_system(record.get("system"), record.get("system_sha256"), "run_start")
        history = _full_messages(record.get("history", []), "run_start history")
        self.messages = len(history)
        return {**record, "history": history}

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
        return {**record, "history": history}

    def run_end(self, record: dict[str, Any]) -> dict[str, Any]:
        out = {**copy.deepcopy(_RUN_END_DEFAULTS), **record}
        out["messages_appended"] = _full_messages(out["messages_appended"], "run_end messages_appended")
        for key in ("usage", "subagent_usage"):
            if key in out:
                out[key] = _full_usage(out[key], turn=False)
        return out


def iter_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of a log file of any readable version, one line at a time, in the version-1 shape.

    One pass: a reference resolves to an earlier line already read, never by reading the file again.
    ``FileNotFoundError`` for a missing file; :class:`MalformedLogError` naming the file and line for a line
    that is not JSON, not an object, or not a record a log writes (see the module's docstring).
    """
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"run log not found: {file}")
    reader = _Reader()
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
                reader = _Reader()  # a new run in the same file (an export of several runs): its own state
            try:
                yield reader.read(record)
            except MalformedLogError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a field missing or of a wrong type
                detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
                raise MalformedLogError(f"{file}:{number}: malformed {record.get('type')!r} record: {detail}") from None


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
