"""Offline models: deterministic transports that need no API key.

Model ids (use them anywhere a model name goes, e.g. ``%%agent -m ...``):

``offline/<name>``
    A scripted model shipped with the package (``harness_magic/offline_scripts/<name>.json``);
    ``offline/quickstart`` drives the quickstart notebook and ``make demo``.
``scripted/<path.json>``
    A scripted model from a JSON file: ``{"turns": [{"text": ..., "tool_calls":
    [{"name": ..., "arguments": {...}}]}, ...]}``. Turns are consumed in order
    across the session, so a script set as ``AgentMagics.model`` can drive
    several cells; ``%%agent --new``/``--reset``, setting the model again, or a
    cell naming it with ``-m`` start it over (the notebook layer rewinds it).
``replay/<run.jsonl>``
    Plays back the assistant turns recorded in a run log, usage included.

Both models speak the transport protocol of :mod:`harness_magic.core.providers.transport`
(OpenAI-style response dicts), so rendering and normalisation are exercised
exactly as with a real provider. Token counts of scripted turns are estimates
(characters / 4); cached tokens estimate the prompt prefix shared with the
previous request, which is what a provider's prompt cache would serve.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from harness_magic.core.providers.errors import ProviderError

__all__ = [
    "ScriptedTurn",
    "ScriptedModel",
    "ReplayModel",
    "is_offline_model",
    "offline_transport",
    "builtin_scripts",
    "OFFLINE_PREFIXES",
]

OFFLINE_PREFIXES = ("offline/", "scripted/", "replay/")
"""Model-id prefixes that select an offline model instead of litellm."""
CHARS_PER_TOKEN = 4
"""Rough characters-per-token ratio for estimated usage of scripted turns."""
STREAM_CHUNK_CHARS = 12
"""Scripted text is streamed in pieces of about this size."""
_SCRIPTS_DIR = Path(str(importlib.resources.files("harness_magic") / "offline_scripts"))
"""Recorded runs shipped in the package (found by package name, so moving this module cannot lose them)."""


@dataclass
class ScriptedTurn:
    """One model turn: optional text and optional tool calls."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{"name": str, "arguments": dict}`` (``id`` optional)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScriptedTurn":
        unknown = set(data) - {"text", "tool_calls", "note"}
        if unknown:
            raise ValueError(f"unknown keys in scripted turn: {sorted(unknown)}; allowed: text, tool_calls, note")
        calls = data.get("tool_calls") or []
        for call in calls:
            if not isinstance(call, dict) or "name" not in call:
                raise ValueError(f"each tool call needs a 'name': {call!r}")
            if not isinstance(call.get("arguments", {}), dict):
                raise ValueError(f"tool call arguments must be an object: {call!r}")
        return cls(text=data.get("text") or "", tool_calls=[dict(c) for c in calls])


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN) if text else 0


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    index = 0
    step = 4096
    while index < limit:  # compare in blocks, then narrow down
        end = min(index + step, limit)
        if a[index:end] == b[index:end]:
            index = end
            continue
        while index < end and a[index] == b[index]:
            index += 1
        break
    return index


def _stream(text: str, on_text: Callable[[str], None] | None) -> None:
    if on_text is None or not text:
        return
    for start in range(0, len(text), STREAM_CHUNK_CHARS):
        on_text(text[start : start + STREAM_CHUNK_CHARS])


class ScriptedModel:
    """Plays scripted turns in order; raises ProviderError when they run out."""

    def __init__(self, turns: Iterable[ScriptedTurn | dict[str, Any]], *, name: str = "scripted") -> None:
        self.turns = [t if isinstance(t, ScriptedTurn) else ScriptedTurn.from_dict(t) for t in turns]
        self.name = name
        self.position = 0
        self._calls = 0
        self._previous_prompt = ""

    @classmethod
    def from_file(cls, path: str | Path) -> "ScriptedModel":
        file = Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"scripted model file not found: {file}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"scripted model file {file} is not valid JSON: {exc}") from None
        turns = data.get("turns") if isinstance(data, dict) else data
        if not isinstance(turns, list):
            raise ValueError(f"{file}: expected {{'turns': [...]}} or a list of turns")
        return cls(turns, name=f"scripted/{file}")

    def fresh(self) -> "ScriptedModel":
        """Same script from the start (a subagent or a new session)."""
        return ScriptedModel(self.turns, name=self.name)

    def rewind(self) -> None:
        """Start the script over (``--new``/``--reset``, or the model set again), so re-running a notebook works."""
        self.position = 0
        self._calls = 0
        self._previous_prompt = ""

    def place(self) -> tuple[int, int, str]:
        """Where the script stands (for :meth:`seek`): the next turn, the tool calls numbered, the last prompt."""
        return self.position, self._calls, self._previous_prompt

    def seek(self, place: tuple[int, int, str]) -> None:
        """Go back to a :meth:`place`: a re-run cell plays the turns its previous run played, with the same
        cached-token estimates."""
        self.position, self._calls, self._previous_prompt = place

    @property
    def remaining(self) -> int:
        return len(self.turns) - self.position

    def _respond(self, payload: dict[str, Any], on_text: Callable[[str], None] | None) -> dict[str, Any]:
        if self.position >= len(self.turns):
            raise ProviderError(
                f"{self.name}: no scripted turn left (all {len(self.turns)} used); add turns to the script, "
                "or start it over: %%agent --new (or --reset, which clears the cache too), or name it with "
                "-m in the cell (each run of such a cell plays it from its start)"
            )
        turn = self.turns[self.position]
        self.position += 1
        _stream(turn.text, on_text)
        calls: list[dict[str, Any]] = []
        for call in turn.tool_calls:
            self._calls += 1
            calls.append(
                {
                    "id": call.get("id") or f"call_{self._calls}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments") or {})},
                }
            )
        prompt = json.dumps(payload.get("messages"), sort_keys=True) + json.dumps(payload.get("tools"), sort_keys=True)
        cached = _common_prefix(prompt, self._previous_prompt)
        self._previous_prompt = prompt
        completion = turn.text + "".join(c["function"]["arguments"] for c in calls)
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {
                "prompt_tokens": _estimate_tokens(prompt),
                "completion_tokens": _estimate_tokens(completion),
                "prompt_tokens_details": {"cached_tokens": cached // CHARS_PER_TOKEN},
            },
            "_cost": 0.0,
        }

    def complete(self, payload: dict[str, Any], on_text: Callable[[str], None] | None) -> dict[str, Any]:
        return self._respond(payload, on_text)

    async def acomplete(self, payload: dict[str, Any], on_text: Callable[[str], None] | None) -> dict[str, Any]:
        return self._respond(payload, on_text)


class ReplayModel:
    """Plays back the assistant turns of a JSONL run log, usage included."""

    def __init__(self, log_path: str | Path, *, start_turn: int = 1) -> None:
        from harness_magic.core.transcript.log import read_log

        self.path = Path(log_path)
        records = read_log(self.path)
        self.responses = [r["response"] for r in records if r.get("type") == "turn"]
        if not self.responses:
            raise ValueError(f"{self.path}: no recorded turns to replay")
        if start_turn < 1:
            raise ValueError(f"start_turn must be >= 1, got {start_turn}")
        self.position = start_turn - 1
        self.start_turn = start_turn

    def fresh(self) -> "ReplayModel":
        return ReplayModel(self.path)

    def rewind(self) -> None:
        """Play the recording again from its start turn."""
        self.position = self.start_turn - 1

    def place(self) -> int:
        """The next recorded turn (for :meth:`seek`)."""
        return self.position

    def seek(self, place: int) -> None:
        """Go back to a :meth:`place` (a re-run cell plays the turns its previous run played)."""
        self.position = place

    def _respond(self, on_text: Callable[[str], None] | None) -> dict[str, Any]:
        from harness_magic.core.transcript.messages import ToolUseBlock, message_from_dict

        if self.position >= len(self.responses):
            raise ProviderError(f"replay/{self.path}: the recording has no turn {self.position + 1}")
        recorded = self.responses[self.position]
        self.position += 1
        message = message_from_dict(recorded["message"])
        _stream(message.text, on_text)
        calls = [
            {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
            for b in message.content
            if isinstance(b, ToolUseBlock)
        ]
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if calls:
            out["tool_calls"] = calls
        usage = recorded.get("usage") or {}
        return {
            "model": recorded.get("model") or f"replay/{self.path.name}",
            "choices": [{"index": 0, "message": out, "finish_reason": recorded.get("stop_reason")}],
            "usage": {
                "prompt_tokens": usage.get("input_tokens", 0),
                "completion_tokens": usage.get("output_tokens", 0),
                "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            },
            "_cost": usage.get("cost", 0.0),
        }

    def complete(self, payload: dict[str, Any], on_text: Callable[[str], None] | None) -> dict[str, Any]:
        return self._respond(on_text)

    async def acomplete(self, payload: dict[str, Any], on_text: Callable[[str], None] | None) -> dict[str, Any]:
        return self._respond(on_text)


def builtin_scripts() -> list[str]:
    """Names usable as ``offline/<name>``."""
    return sorted(p.stem for p in _SCRIPTS_DIR.glob("*.json"))


def is_offline_model(model: str) -> bool:
    return isinstance(model, str) and model.startswith(OFFLINE_PREFIXES)


def offline_transport(model: str) -> ScriptedModel | ReplayModel:
    """The offline model a model id names; clear errors for bad ids."""
    prefix, _, rest = model.partition("/")
    if not rest:
        raise ValueError(f"model {model!r} needs a name after '{prefix}/'")
    if prefix == "offline":
        path = _SCRIPTS_DIR / f"{rest}.json"
        if not path.exists():
            raise ValueError(f"no built-in offline script {rest!r}; available: {', '.join(builtin_scripts())}")
        model_ = ScriptedModel.from_file(path)
        model_.name = model
        return model_
    if prefix == "scripted":
        return ScriptedModel.from_file(rest)
    if prefix == "replay":
        return ReplayModel(rest)
    raise ValueError(f"unknown offline model {model!r}; use one of {', '.join(OFFLINE_PREFIXES)}")
