"""Wire format between the kernel and the sandbox worker.

Frames are a 4-byte big-endian length and a UTF-8 JSON object. Values that are
not tables or arrays travel as *tagged JSON*: every value is ``{"t": tag, ...}``
with a closed set of tags, so decoding in the kernel is plain data construction
— nothing the worker wrote is ever unpickled or evaluated. Anything outside the
closed set arrives as a :class:`RemoteObject` holding a bounded repr string.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import os
import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_FRAME_BYTES",
    "JSON_VALUE_MAX_BYTES",
    "REPR_MAX_CHARS",
    "ProtocolError",
    "RemoteObject",
    "send_frame",
    "recv_frame",
    "FrameReader",
    "encode_value",
    "decode_value",
]

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""A reply larger than this is refused: tables and arrays go through files, not frames."""

JSON_VALUE_MAX_BYTES = 1_000_000
"""Text, scalars and small containers beyond this become a repr: they would flood the model anyway."""

REPR_MAX_CHARS = 20_000
"""Reprs of unknown objects are cut here; the formatter bounds them again for the model."""

_MAX_DEPTH = 20
"""Nesting deeper than this is not a 'small container'."""

_MAX_INT_DIGITS = 4000
"""Below CPython's int/str conversion limit, so encoding and decoding never raise."""


class ProtocolError(Exception):
    """The peer sent something malformed, oversized or of an unexpected type."""


@dataclass(frozen=True)
class RemoteObject:
    """An object the worker could not send as data: its type name and bounded repr."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=True)
"""One encoder for every frame (``json.dumps`` with options builds a new one per call)."""


def send_frame(fd: int, message: dict[str, Any]) -> None:
    data = _ENCODER.encode(message).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def recv_frame(fd: int, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """Blocking read of one frame: only for the worker's side (the kernel uses :class:`FrameReader`)."""
    (size,) = struct.unpack(">I", _read_exact(fd, 4))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds {max_bytes}")
    return _decode_frame(_read_exact(fd, size))


class FrameReader:
    """Assembles one frame from a non-blocking descriptor, a chunk at a time.

    :meth:`feed` reads whatever is available now (never waits) and returns the
    decoded frame once it is complete, else ``None``; the caller owns the
    deadline and calls it again when ``select`` says the descriptor is
    readable. A declared size above ``max_bytes`` is refused as soon as the
    4-byte header arrives, so a peer can never make the reader buffer more
    than ``max_bytes`` plus one chunk.
    """

    CHUNK_BYTES = 1 << 20
    """Bytes taken per read: keeps one feed() short so the caller's watchdog keeps running."""

    def __init__(self, fd: int, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.fd, self.max_bytes = fd, max_bytes
        self._buffer = bytearray()
        self._size: int | None = None

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame held so far."""
        return len(self._buffer)

    def feed(self) -> dict[str, Any] | None:
        """Read what is available; the frame when complete. EOFError/ProtocolError on a bad peer.

        Reads never go past the frame being assembled (the next one stays in
        the pipe), and the body is read right after its header when it is
        there already: a small frame costs two reads and no second wait.
        """
        while True:
            want = 4 - len(self._buffer) if self._size is None else self._size - len(self._buffer)
            try:
                chunk = os.read(self.fd, max(1, min(want, self.CHUNK_BYTES)))
            except BlockingIOError:
                return None
            if not chunk:
                raise EOFError("peer closed the pipe" + (" mid-frame" if self._buffer else ""))
            self._buffer += chunk
            if self._size is not None:
                break  # at most one body chunk per feed
            if len(self._buffer) < 4:
                return None
            (self._size,) = struct.unpack(">I", bytes(self._buffer[:4]))
            del self._buffer[:4]
            if self._size > self.max_bytes:
                raise ProtocolError(f"frame of {self._size} bytes exceeds {self.max_bytes}")
            if not self._size:
                break  # an empty body: nothing to read (it is refused as not JSON below)
        if len(self._buffer) < self._size:
            return None
        data, self._buffer, self._size = bytes(self._buffer), bytearray(), None
        return _decode_frame(data)


def _decode_frame(data: bytes) -> dict[str, Any]:
    try:
        message = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


# -- tagged values --------------------------------------------------------------------------


class _TooBig(Exception):
    pass


def encode_value(value: Any) -> dict[str, Any]:
    """Tagged JSON for plain data; a bounded repr (``{"t": "repr"}``) for everything else."""
    try:
        encoded = _encode(value, 0)
        if len(json.dumps(encoded)) > JSON_VALUE_MAX_BYTES:
            raise _TooBig
        return encoded
    except (_TooBig, TypeError, ValueError, RecursionError):
        return {"t": "repr", "type": _type_name(value), "text": safe_repr(value)}


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ is the model's problem
        text = f"<{_type_name(value)} (repr failed: {type(exc).__name__})>"
    if not isinstance(text, str):
        text = f"<{_type_name(value)}>"
    if len(text) > REPR_MAX_CHARS:
        half = REPR_MAX_CHARS // 2
        text = f"{text[:half]}\n... [{len(text) - REPR_MAX_CHARS} chars cut] ...\n{text[-half:]}"
    return text


def _encode(value: Any, depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise _TooBig
    if value is None:
        return {"t": "none"}
    kind = type(value)
    if kind is bool:
        return {"t": "bool", "v": value}
    if kind is int:
        if value.bit_length() > _MAX_INT_DIGITS * 3:
            raise _TooBig
        return {"t": "int", "v": str(value)}
    if kind is float:
        return {"t": "float", "v": repr(value)}
    if kind is str:
        if len(value) > JSON_VALUE_MAX_BYTES:
            raise _TooBig
        return {"t": "str", "v": value}
    if kind is complex:
        return {"t": "complex", "v": [repr(value.real), repr(value.imag)]}
    if kind in (bytes, bytearray):
        if len(value) > JSON_VALUE_MAX_BYTES // 2:
            raise _TooBig
        return {"t": "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if kind in (list, tuple, set, frozenset):
        tags: dict[type, str] = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
        tag = tags[kind]
        return {"t": tag, "v": [_encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"t": "dict", "v": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if kind is decimal.Decimal:
        return {"t": "decimal", "v": str(value)}
    if kind is _dt.datetime:
        return {"t": "datetime", "v": value.isoformat()}
    if kind is _dt.date:
        return {"t": "date", "v": value.isoformat()}
    if kind is _dt.time:
        return {"t": "time", "v": value.isoformat()}
    if kind is _dt.timedelta:
        return {"t": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    module = kind.__module__
    if module == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        item = value.item()
        if type(item) in (bool, int, float, complex, str):
            return _encode(item, depth + 1)
    if module.startswith("pandas") and kind.__name__ == "Timestamp":
        return {"t": "timestamp", "v": value.isoformat(), "tz": str(value.tz) if value.tz else None}
    if module.startswith("pandas") and kind.__name__ == "Timedelta":
        return {"t": "pd_timedelta", "v": int(value.value)}
    if module.startswith("pandas") and kind.__name__ in ("NAType", "NaTType"):
        return {"t": kind.__name__}
    raise TypeError(kind.__name__)


def decode_value(data: Any, depth: int = 0) -> Any:
    """Rebuild a value from tagged JSON, validating every node. Never evaluates anything."""
    if depth > _MAX_DEPTH + 2 or not isinstance(data, dict) or not isinstance(data.get("t"), str):
        raise ProtocolError("malformed tagged value")
    tag, v = data["t"], data.get("v")
    try:
        if tag == "none":
            return None
        if tag == "bool" and isinstance(v, bool):
            return v
        if tag == "int" and isinstance(v, str) and len(v) <= _MAX_INT_DIGITS + 1:
            return int(v)
        if tag == "float" and isinstance(v, str) and len(v) < 40:
            return float(v)
        if tag == "str" and isinstance(v, str):
            return v
        if tag == "complex" and isinstance(v, list) and len(v) == 2:
            return complex(float(v[0]), float(v[1]))
        if tag == "bytes" and isinstance(v, str):
            return base64.b64decode(v, validate=True)
        if tag in ("list", "tuple", "set", "frozenset") and isinstance(v, list):
            items = [decode_value(item, depth + 1) for item in v]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict" and isinstance(v, list):
            out = {}
            for pair in v:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ProtocolError("malformed dict item")
                out[decode_value(pair[0], depth + 1)] = decode_value(pair[1], depth + 1)
            return out
        if tag == "decimal" and isinstance(v, str) and len(v) < 200:
            return decimal.Decimal(v)
        if tag == "datetime" and isinstance(v, str):
            return _dt.datetime.fromisoformat(v)
        if tag == "date" and isinstance(v, str):
            return _dt.date.fromisoformat(v)
        if tag == "time" and isinstance(v, str):
            return _dt.time.fromisoformat(v)
        if tag == "timedelta" and isinstance(v, list) and all(type(x) is int for x in v):
            return _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
        if tag == "timestamp" and isinstance(v, str):
            import pandas as pd

            stamp = pd.Timestamp(_dt.datetime.fromisoformat(v))
            return stamp
        if tag == "pd_timedelta" and type(v) is int:
            import pandas as pd

            return pd.Timedelta(v, unit="ns")
        if tag == "NAType":
            import pandas as pd

            return pd.NA
        if tag == "NaTType":
            import pandas as pd

            return pd.NaT
        if tag == "repr" and isinstance(data.get("text"), str) and isinstance(data.get("type"), str):
            return RemoteObject(data["type"][:200], data["text"][: REPR_MAX_CHARS + 200])
    except (ValueError, TypeError, OverflowError) as exc:
        raise ProtocolError(f"bad {tag} value: {exc}") from exc
    raise ProtocolError(f"unknown or malformed tag {tag!r}")
