"""The provider host's wire format: length-prefixed JSON frames, bounded, and errors as tagged dicts.

Shared by the kernel side (:mod:`.hosted`) and the host process (:mod:`.host`). A frame is a 4-byte
big-endian length followed by that many bytes of UTF-8 JSON holding one object (a dict). Nothing read
back is ever executed: no pickle, only JSON, and a frame longer than :data:`FRAME_MAX_BYTES` is refused
before its body is read (:class:`FrameError` names the length and the cap). A provider error travels as
``{"class": name, "message": text, **attributes}`` (:func:`tag_error`) and is rebuilt by
:func:`rebuild_error` only as one of the :mod:`.errors` classes named in :data:`ERROR_CLASSES`, with only
the attributes those classes declare, each checked for its type. This module imports nothing heavy:
the settings table reads :data:`DEFAULT_IDLE_S` from it.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from harness_magic.core.providers.errors import (
    ContextWindowExceeded,
    ModelNotServed,
    ModelRouteError,
    ProviderAuthError,
    ProviderError,
    ProviderHTTPError,
    ProviderUnreachable,
)

__all__ = ["FRAME_MAX_BYTES", "DEFAULT_IDLE_S", "IDLE_S_MAX", "check_idle_s", "FrameError", "encode_frame", "read_frame", "send_frame",
           "decode_frame", "frame_length", "tag_error", "rebuild_error", "ERROR_CLASSES", "ERROR_ATTRIBUTES"]

FRAME_MAX_BYTES = 64 * 1024 * 1024
"""Largest frame either side reads or sends: a whole request (a long conversation) or a response, never more."""
DEFAULT_IDLE_S = 120.0
"""Seconds the provider host waits without a request before it exits (``provider_idle_s``'s default)."""
IDLE_S_MAX = 7 * 24 * 3600.0
"""Longest idle life a host may be given (a week): longer is a typing mistake, and a host that never ends
holds litellm for good."""
_SHOWN_CHARS = 80
"""How much of a refused value a message quotes."""
_HEADER = struct.Struct(">I")
"""The frame's length prefix."""

ERROR_CLASSES: dict[str, type[ProviderError]] = {cls.__name__: cls for cls in (
    ProviderError, ModelRouteError, ProviderUnreachable, ProviderHTTPError, ProviderAuthError, ModelNotServed,
    ContextWindowExceeded)}
"""The only classes an error read from the host is rebuilt as (by name)."""
ERROR_ATTRIBUTES: dict[str, tuple[type, ...]] = {
    "status_code": (int, type(None)), "retryable": (bool,), "request_sent": (bool,), "url": (str,),
    "model": (str,), "served": (list, type(None)), "prompt_tokens": (int, type(None)),
    "window": (int, type(None)), "server_said": (str, type(None)),
}
"""Every attribute a :class:`ProviderError` subclass carries, with the types it may have."""


def check_idle_s(value: Any, label: str = "provider_idle_s") -> float:
    """Seconds > 0 and at most :data:`IDLE_S_MAX` that an idle host lives; ValueError naming ``label`` and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= IDLE_S_MAX:
        shown = repr(value)
        shown = shown if len(shown) <= _SHOWN_CHARS else shown[:_SHOWN_CHARS - 3] + "..."
        raise ValueError(f"{label} must be a number of seconds above 0 and at most {IDLE_S_MAX:,.0f}, got {shown}")
    return float(value)


class FrameError(Exception):
    """A frame that is not a bounded JSON object (too long, cut short, not JSON, not an object)."""


def encode_frame(body: dict[str, Any]) -> bytes:
    """``body`` as one frame; values JSON cannot hold are written as their text (a response's odd field).

    FrameError when the frame would exceed :data:`FRAME_MAX_BYTES`.
    """
    data = json.dumps(body, ensure_ascii=False, default=str, separators=(",", ":")).encode("utf-8")
    if len(data) > FRAME_MAX_BYTES:
        raise FrameError(f"a frame of {len(data):,} bytes exceeds FRAME_MAX_BYTES ({FRAME_MAX_BYTES:,})")
    return _HEADER.pack(len(data)) + data


def send_frame(sock: socket.socket, body: dict[str, Any]) -> None:
    """Write one frame to ``sock`` (OSError when the peer is gone)."""
    sock.sendall(encode_frame(body))


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``sock``; None when the peer closed before the first byte; FrameError when cut short."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = sock.recv(min(size - got, 1024 * 1024))
        if not chunk:
            if got == 0:
                return None
            raise FrameError(f"the frame was cut short after {got:,} of {size:,} bytes")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def frame_length(header: bytes) -> int:
    """The body length a 4-byte header announces; FrameError past :data:`FRAME_MAX_BYTES` (nothing more is read)."""
    (length,) = _HEADER.unpack(header)
    if length > FRAME_MAX_BYTES:
        raise FrameError(f"a frame announced {length:,} bytes; FRAME_MAX_BYTES is {FRAME_MAX_BYTES:,}: refused unread")
    return int(length)


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame's object from ``sock``; None when the peer closed between frames; FrameError otherwise."""
    header = _read_exactly(sock, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(sock, frame_length(header))
    if body is None:
        raise FrameError("the frame was cut short after its header")
    return decode_frame(body)


def decode_frame(body: bytes) -> dict[str, Any]:
    """A frame's body as a JSON object; FrameError for anything else (bytes that are not JSON, a list, a number)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError(f"a frame of {len(body):,} bytes is not JSON: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise FrameError(f"a frame holds a {type(value).__name__}, not a JSON object")
    return value


def tag_error(exc: ProviderError) -> dict[str, Any]:
    """``exc`` as a plain dict: its class name, its message and every attribute of :data:`ERROR_ATTRIBUTES` it has."""
    tagged: dict[str, Any] = {"class": type(exc).__name__ if type(exc).__name__ in ERROR_CLASSES else "ProviderError",
                              "message": str(exc)}
    for name in ERROR_ATTRIBUTES:
        if name in exc.__dict__:
            tagged[name] = exc.__dict__[name]
    return tagged


def rebuild_error(tagged: Any) -> ProviderError:
    """The :class:`ProviderError` a tagged dict describes; FrameError for an unknown class or a mistyped attribute.

    The instance is made without running any constructor but :class:`Exception`'s: its message is scrubbed
    again here (this process's registered secrets) by :class:`ProviderError`'s own rule.
    """
    if not isinstance(tagged, dict) or not isinstance(tagged.get("class"), str) \
            or not isinstance(tagged.get("message"), str):
        raise FrameError("an error frame needs a 'class' and a 'message' (texts)")
    cls = ERROR_CLASSES.get(tagged["class"])
    if cls is None:
        raise FrameError(f"an error frame names class {tagged['class'][:80]!r}; allowed: {', '.join(ERROR_CLASSES)}")
    extra = set(tagged) - {"class", "message"} - set(ERROR_ATTRIBUTES)
    if extra:
        raise FrameError(f"an error frame carries unknown fields: {', '.join(sorted(extra))[:200]}")
    error = cls.__new__(cls)
    ProviderError.__init__(error, tagged["message"])  # scrubs the message; sets the base attributes' defaults
    for name, allowed in ERROR_ATTRIBUTES.items():
        if name not in tagged:
            continue
        value = tagged[name]
        if type(value) not in allowed or (name == "served" and value is not None
                                          and not all(isinstance(item, str) for item in value)):
            raise FrameError(f"an error frame's {name} is a {type(value).__name__}, not one of "
                             f"{', '.join(t.__name__ for t in allowed)}")
        setattr(error, name, value)
    return error
