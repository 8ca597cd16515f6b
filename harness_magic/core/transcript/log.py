"""JSONL run logs, written from the first turn, and transcript reconstruction.

One file per run (``<run_dir>/<UTC time>-<run_id>.jsonl``), one JSON object
per line, appended as the run goes — the whole history is never rewritten:

``run_start``
    run id, session id, model, the system prompt and its SHA-256, every tool's
    schema and visibility, the history the run continues (``history``), and
    the prompt.
``turn``
    one provider call: the messages appended since the previous call
    (``request.messages_appended``), reminders, visible tool names, the
    system prompt's hash, the normalised response and the provider's raw
    response, latency, usage (cached tokens and cost included), cumulative
    usage, and cache metadata (handles, types, shapes, locations — never
    payloads).
``tools``
    metadata of the tool calls of a turn (name, error flag, duration, handles).
``event``
    harness behaviour worth auditing (connector loads, approvals, verifications).
``run_end``
    status, final text, error, totals, and messages appended after the last
    call (the final tool results of a cut-off or interrupted run).
``superseded``
    appended after ``run_end`` when the run's cell was run again
    (:func:`mark_superseded`): the id of the run that replaced it (``by``) and
    the cell's ``run_key``. The run's own records stay as they were.

:func:`reconstruct_transcript` rebuilds the exact message list from a log.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from harness_magic.core.transcript.messages import Message, message_from_dict, message_to_dict
from harness_magic.core.transcript.scrub import scrub

__all__ = ["RunLogger", "read_log", "reconstruct_transcript", "mark_superseded", "system_hash", "LOG_SUFFIX"]

LOG_SUFFIX = ".jsonl"


@functools.lru_cache(maxsize=16)
def system_hash(system: str) -> str:
    """SHA-256 of the system prompt (memoised: every turn record carries it)."""
    return hashlib.sha256(system.encode("utf-8")).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _dumps(record: dict[str, Any]) -> str:
    """One log line, scrubbed of secrets (:func:`~harness_magic.core.transcript.scrub.scrub`)."""
    return scrub(json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":")))


class RunLogger:
    """Appends the records of one run to its own JSONL file."""

    def __init__(self, run_dir: str | os.PathLike[str], run_id: str) -> None:
        directory = Path(run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.run_id = run_id
        self.path = directory / f"{stamp}-{run_id}{LOG_SUFFIX}"
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record_type: str, **fields: Any) -> None:
        record = {"type": record_type, "run_id": self.run_id, "time": _now(), **fields}
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
            system_sha256=system_hash(system),
            tools=[{**t.schema(), "visible": t.visible, "safety": t.safety, "connector": t.connector} for t in tools],
            history=[message_to_dict(m) for m in history],
            prompt=prompt,
            max_turns=max_turns,
            **(extra or {}),
        )

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def mark_superseded(path: str | os.PathLike[str], run_id: str, *, by: str, run_key: str | None) -> None:
    """Append a ``superseded`` record to the finished run log at ``path``: run ``by`` replaced it."""
    record = {"type": "superseded", "run_id": run_id, "time": _now(), "by": by, "run_key": run_key}
    with open(path, "a", encoding="utf-8") as file:
        file.write(_dumps(record) + "\n")


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a log file; a clear error for a missing or broken file."""
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"run log not found: {file}")
    records = []
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{file}:{number}: not a JSON record ({exc})") from None
    return records


def reconstruct_transcript(path: str | os.PathLike[str]) -> list[Message]:
    """The exact message list at the end of the run the log describes."""
    messages: list[Message] = []
    for record in read_log(path):
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
