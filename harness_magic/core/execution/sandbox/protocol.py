"""Wire format between the kernel and the sandbox worker.

Frames are a 4-byte big-endian length and a JSON object in UTF-8 (a lone surrogate, which a
Python string may hold, crosses in its 3-byte form and comes back as it was), except the two frames
every call sends, whose fixed fields are packed (:func:`send_exec`, :func:`send_reply`): an ``exec``
request (its seq in a binary header, its code's UTF-8 as is, JSON only for the fields that vary) and
an empty call's reply (``{"op": "result", "seq": N}`` as 9 bytes). A body's first byte tells them
apart (a JSON object starts with ``{``); both decode to the dict their JSON form would. Values that are
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
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_FRAME_BYTES",
    "JSON_VALUE_MAX_BYTES",
    "REPR_MAX_CHARS",
    "ProtocolError",
    "RemoteObject",
    "send_frame",
    "send_exec",
    "send_reply",
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


_HEADER = struct.Struct(">I")
"""A frame's length: 4 bytes, big-endian."""


def _refuse_unknown(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _frame_encoder() -> Callable[[dict[str, Any]], str]:
    """The text of a frame's JSON object, compact (no spaces), NaN and infinities allowed, non-ASCII kept.

    The C encoder is built once (``json.dumps`` and ``JSONEncoder.encode`` build
    one per call) and keeps no table of containers seen: frames are trees our
    code builds (a cycle would end in RecursionError, as deep nesting does).
    Where the C accelerator is missing or takes other arguments, the
    pure-Python encoder with the same options does the same work.
    """
    fallback = json.JSONEncoder(ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return fallback
    try:
        encode = make(None, _refuse_unknown, json.encoder.encode_basestring, None, ":", ",", False, False, True)
        if "".join(encode({"a": [1.5, None, "é"]}, 0)) != fallback({"a": [1.5, None, "é"]}):
            return fallback
    except TypeError:  # another Python's C encoder takes other arguments
        return fallback
    return lambda message: "".join(encode(message, 0))


_encode_frame = _frame_encoder()

_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__; typeshed omits it
"""The C scanner ``json.loads`` ends in, without its two whitespace matches and three Python calls per frame."""


EXEC_FRAME = 1
"""First byte of a packed ``exec`` request (:func:`send_exec`)."""

RESULT_FRAME = 2
"""First byte of a packed empty reply (:func:`send_reply`)."""

_EXEC_HEAD = struct.Struct(">BQI")
"""A packed ``exec`` request's head: :data:`EXEC_FRAME`, its seq, the bytes of the JSON object of its other
fields that follows (0: none); the rest of the frame is the code's UTF-8."""

_EXEC_FRAMED = struct.Struct(">IBQI")
"""A packed ``exec`` request's frame length (:data:`_HEADER`) and head (:data:`_EXEC_HEAD`), packed at once."""

_EXEC_HEAD_FIELDS = frozenset({"op", "seq", "code"})
"""What a packed request's head and code give: its JSON fields may not name them again."""

_EMPTY_RESULT = struct.Struct(">BQ")
"""A packed empty reply: :data:`RESULT_FRAME` and its seq (the whole frame)."""

_EMPTY_FRAMED = struct.Struct(">IBQ")
"""A packed empty reply with its frame length first, packed at once."""

_SEQ_LIMIT = 1 << 64
"""Seqs a packed frame holds (a larger one, never sent by the kernel, goes as JSON)."""


def send_frame(fd: int, message: dict[str, Any]) -> None:
    """Write ``message`` as one frame of JSON (a single write when the pipe has room)."""
    _write_frame(fd, _encode_frame(message).encode("utf-8", "surrogatepass"))  # a lone surrogate crosses as is


def send_exec(fd: int, seq: int, code: str, fields: dict[str, Any] | None = None) -> None:
    """Write an ``exec`` request for ``code`` as one packed frame: ``seq`` in its head, the code's UTF-8 as is
    (never escaped into JSON), and JSON only for ``fields`` (``inputs``, ``taken``), left out when there are
    none. It reads back as ``{"op": "exec", "seq": seq, "code": code, **fields}``."""
    extra = _encode_frame(fields).encode("utf-8", "surrogatepass") if fields else b""
    text = code.encode("utf-8", "surrogatepass")
    size = _EXEC_HEAD.size + len(extra) + len(text)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    _write_all(fd, _EXEC_FRAMED.pack(size, EXEC_FRAME, seq, len(extra)) + extra + text)  # one pack, one copy


def send_reply(fd: int, reply: dict[str, Any]) -> None:
    """Write a worker's ``reply``: ``{"op": "result", "seq": N}`` alone (an empty call's) as 9 packed bytes,
    anything else as JSON (:func:`send_frame`)."""
    seq = reply.get("seq")
    if len(reply) == 2 and reply.get("op") == "result" and type(seq) is int and 0 <= seq < _SEQ_LIMIT:
        _write_all(fd, _EMPTY_FRAMED.pack(_EMPTY_RESULT.size, RESULT_FRAME, seq))
    else:
        send_frame(fd, reply)


def _write_frame(fd: int, data: bytes) -> None:
    """Write ``data`` as one frame's body (a single write when the pipe has room)."""
    size = len(data)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    _write_all(fd, _HEADER.pack(size) + data)


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` (a whole frame, its length first): one write when the pipe has room."""
    written = os.write(fd, data)
    if written < len(data):  # a frame larger than the pipe's room: the rest as the reader makes room
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view):]


class FrameReader:
    """Frames from one descriptor, in order, a read at a time; bytes read past a frame wait for the next.

    :meth:`feed` makes at most one read (up to :data:`READ_BYTES`, or the rest
    of the frame being assembled when it is larger), so a small frame costs one
    read, and returns the first complete frame, else ``None``. On a
    non-blocking descriptor it never waits: the caller owns the deadline and
    calls it again when ``poll`` says the descriptor is readable, after
    taking what :meth:`take` still holds (a read may bring several frames;
    ``poll`` does not see bytes already read). On a blocking descriptor
    :meth:`next_frame` waits for one. A declared size above ``max_bytes`` is
    refused as soon as its 4-byte header is in, so a peer can never make the
    reader hold more than ``max_bytes`` plus one read. Keep one reader per
    descriptor: a new one would lose what the old one had read.
    """

    READ_BYTES = 1 << 16
    """Bytes asked for when no large frame is being assembled: a pipe's whole buffer."""

    CHUNK_BYTES = 1 << 20
    """Most bytes taken per read of a large frame: keeps one feed() short so the caller's watchdog keeps running."""

    def __init__(self, fd: int, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.fd, self.max_bytes = fd, max_bytes
        self._buffer = bytearray()
        self._size: int | None = None

    @property
    def pending(self) -> int:
        """Bytes read and not yet returned as a frame (a frame being assembled, or frames read past one)."""
        return len(self._buffer)

    def take(self) -> dict[str, Any] | None:
        """The next frame already read, without reading; ``None`` when none is complete.

        ProtocolError on an oversized size or a body that is not a JSON object."""
        buffer = self._buffer
        if self._size is None:
            if len(buffer) < 4:
                return None
            (size,) = _HEADER.unpack_from(buffer)
            if size > self.max_bytes:
                raise ProtocolError(f"frame of {size} bytes exceeds {self.max_bytes}")
            self._size = size
        end = 4 + self._size
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            data = bytes(view[4:end])  # one copy (a bytearray slice would be a second)
        del buffer[:end]
        self._size = None
        return _decode_frame(data)

    def feed(self) -> dict[str, Any] | None:
        """The next frame: one already read, else after at most one read; ``None`` when none is complete yet.

        EOFError when the peer closed the descriptor ("mid-frame" when it left one
        half sent), ProtocolError on a malformed or oversized frame."""
        buffer = self._buffer
        short = 0
        if buffer:
            frame = self.take()
            if frame is not None:
                return frame
            short = 0 if self._size is None else 4 + self._size - len(buffer)
        try:
            chunk = os.read(self.fd, min(short, self.CHUNK_BYTES) if short > self.READ_BYTES else self.READ_BYTES)
        except BlockingIOError:
            return None
        if not chunk:
            raise EOFError("peer closed the pipe" + (" mid-frame" if buffer else ""))
        if not buffer and len(chunk) > 4 and _HEADER.unpack_from(chunk)[0] == len(chunk) - 4 <= self.max_bytes:
            return _decode_frame(chunk[4:])  # the usual read: exactly one whole frame, decoded without buffering
        buffer += chunk
        return self.take()

    def next_frame(self) -> dict[str, Any]:
        """The next frame, waiting for it (a blocking descriptor: the worker's request pipe)."""
        while True:
            frame = self.feed()
            if frame is not None:
                return frame


def _decode_frame(data: bytes) -> dict[str, Any]:
    """A frame's body as the dict it stands for: a packed request or empty reply (see :func:`send_exec`,
    :func:`send_reply`), else the JSON object it must be (one object, nothing around it); or ProtocolError."""
    kind = data[0] if data else None
    if kind == RESULT_FRAME:
        if len(data) != _EMPTY_RESULT.size:
            raise ProtocolError(f"packed reply of {len(data)} bytes, not {_EMPTY_RESULT.size}")
        return {"op": "result", "seq": _EMPTY_RESULT.unpack(data)[1]}
    if kind == EXEC_FRAME:
        return _decode_exec(data)
    return _decode_json(data)


def _decode_exec(data: bytes) -> dict[str, Any]:
    """A packed ``exec`` request (see :func:`send_exec`) as its dict, or ProtocolError."""
    head = _EXEC_HEAD.size
    if len(data) < head:
        raise ProtocolError(f"packed request of {len(data)} bytes, shorter than its {head}-byte head")
    _, seq, extra = _EXEC_HEAD.unpack_from(data)
    if extra > len(data) - head:
        raise ProtocolError(f"packed request names {extra} bytes of fields, more than its {len(data) - head}")
    fields = _decode_json(data[head:head + extra]) if extra else {}
    repeated = fields.keys() & _EXEC_HEAD_FIELDS
    if repeated:
        raise ProtocolError(f"packed request's fields repeat its head or code: {sorted(repeated)}")
    try:
        code = data[head + extra:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"packed request's code is not UTF-8: {exc}") from None
    return {"op": "exec", "seq": seq, "code": code, **fields}


def _decode_json(data: bytes) -> dict[str, Any]:
    """A frame's body as the JSON object it must be (one object, nothing around it), or ProtocolError."""
    try:
        text = data.decode("utf-8", "surrogatepass")
        message, end = _scan_json(text, 0)
    except StopIteration as exc:  # the scanner's word for "no JSON value starts here"
        raise ProtocolError(f"frame is not JSON: no value at {exc.value}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame is not JSON: {type(exc).__name__}: {exc}") from None
    if end != len(text):
        raise ProtocolError(f"frame is not JSON: extra data at {end}")
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
