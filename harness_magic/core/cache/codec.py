"""Tagged JSON: the one code-free encoding for Python objects read back from disk or a worker.

Contract: :func:`decode_tagged` only constructs plain data from a closed set of
tags — it never imports, unpickles or evaluates anything named by the input.
:func:`encode_tagged` is *strict*: ``decode_tagged(encode_tagged(v))`` equals
``v`` with the same Python types all the way down (``1`` stays ``int``,
``Decimal('2.00')`` keeps its exponent, ``np.float32`` stays ``np.float32``,
``pd.NA``/``None``/``NaN`` stay distinct, a ``Timestamp`` keeps its
nanoseconds and its zone name). A value outside the set raises
:class:`Unencodable` naming its kind; nothing is ever turned into a repr.

Used by the spill files and checkpoints (object cells, labels, attrs,
series names) and by the worker transfer.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
from typing import Any

__all__ = ["Unencodable", "encode_tagged", "decode_tagged", "TAGGED_MAX_DEPTH"]

TAGGED_MAX_DEPTH = 40
"""Nesting deeper than this is refused: decoding recursion stays bounded."""
_MAX_INT_DIGITS = 4000
"""Below CPython's int/str conversion limit, so encoding and decoding never raise."""
_NUMPY_SCALAR_KINDS = "biufcmMSU"
"""numpy scalar kinds carried with their dtype (bool, ints, floats, complex, times, bytes, str)."""


class Unencodable(TypeError):
    """A value has no exact code-free encoding; ``kind`` names its type."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind} values have no exact safe encoding{': ' + detail if detail else ''}")
        self.kind = kind


def _kind_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def encode_tagged(value: Any, depth: int = 0) -> Any:
    """JSON-ready tagged form of ``value`` (see the module contract); raises :class:`Unencodable`."""
    if depth > TAGGED_MAX_DEPTH:
        raise Unencodable(_kind_name(value), f"nested deeper than {TAGGED_MAX_DEPTH}")
    if value is None:
        return ["none"]
    kind = type(value)
    if kind is bool:
        return ["bool", value]
    if kind is int:
        if value.bit_length() > _MAX_INT_DIGITS * 3:
            raise Unencodable("int", "too many digits")
        return ["int", str(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is str:
        return ["str", value]
    if kind is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if kind is bytes:
        return ["bytes", base64.b64encode(value).decode("ascii")]
    if kind is bytearray:
        return ["bytearray", base64.b64encode(bytes(value)).decode("ascii")]
    if kind in (list, tuple, set, frozenset):
        items = sorted(value, key=repr) if kind in (set, frozenset) else value
        return [kind.__name__, [encode_tagged(item, depth + 1) for item in items]]
    if kind is dict:
        return ["dict", [[encode_tagged(k, depth + 1), encode_tagged(v, depth + 1)] for k, v in value.items()]]
    if kind is decimal.Decimal:
        return ["decimal", str(value)]
    if kind is _dt.datetime:
        if value.tzinfo is not None and value.tzinfo is not _dt.timezone.utc and \
                not isinstance(value.tzinfo, _dt.timezone):
            raise Unencodable("datetime", "only UTC offsets are carried for plain datetimes; use pd.Timestamp")
        return ["datetime", value.isoformat(), value.fold]
    if kind is _dt.date:
        return ["date", value.isoformat()]
    if kind is _dt.time:
        if value.tzinfo is not None:
            raise Unencodable("time", "time zones on plain times are not carried")
        return ["time", value.isoformat()]
    if kind is _dt.timedelta:
        return ["timedelta", value.days, value.seconds, value.microseconds]
    module = kind.__module__
    if module == "numpy":
        return _encode_numpy(value, depth)
    if module.startswith("pandas"):
        return _encode_pandas(value, kind.__name__)
    raise Unencodable(_kind_name(value))


def _encode_numpy(value: Any, depth: int) -> Any:
    import numpy as np

    if isinstance(value, np.generic) and value.dtype.kind in _NUMPY_SCALAR_KINDS and not value.dtype.fields:
        array = np.array([value])
        return ["np", value.dtype.str, base64.b64encode(array.tobytes()).decode("ascii")]
    if type(value) is np.ndarray and value.dtype.hasobject and value.dtype == object:
        order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
        items = [encode_tagged(item, depth + 1) for item in value.ravel(order="K" if order == "C" else "F")]
        return ["objarray", list(value.shape), order, items]
    raise Unencodable(_kind_name(value))


def _encode_pandas(value: Any, name: str) -> Any:
    if name == "NAType":
        return ["NA"]
    if name == "NaTType":
        return ["NaT"]
    if name == "Timestamp":
        tz = value.tz
        if tz is not None and _tz_name(tz) is None:
            raise Unencodable("pandas.Timestamp", f"time zone {tz!r} has no name")
        return ["timestamp", int(value.value), value.unit, _tz_name(tz) if tz is not None else None]
    if name == "Timedelta":
        return ["pd_timedelta", int(value.value), value.unit]
    if name == "Period":
        return ["period", int(value.ordinal), value.freqstr]
    if name == "Interval":
        return ["interval", encode_tagged(value.left), encode_tagged(value.right), value.closed]
    raise Unencodable(f"pandas.{name}")


def _tz_name(tz: Any) -> str | None:
    key = getattr(tz, "key", None) or getattr(tz, "zone", None)
    if isinstance(key, str):
        return key
    if tz is _dt.timezone.utc or str(tz) == "UTC":
        return "UTC"
    if isinstance(tz, _dt.timezone):
        offset = tz.utcoffset(None)
        return f"offset:{int(offset.total_seconds())}"
    return None


def _tz_from_name(name: str) -> Any:
    if name.startswith("offset:"):
        return _dt.timezone(_dt.timedelta(seconds=int(name[7:])))
    if name == "UTC":
        return _dt.timezone.utc
    import zoneinfo

    return zoneinfo.ZoneInfo(name)


class TaggedError(ValueError):
    """Tagged data is malformed (it was not written by :func:`encode_tagged`)."""


def decode_tagged(data: Any, depth: int = 0) -> Any:
    """Rebuild a value from :func:`encode_tagged` output; raises :class:`TaggedError` on anything else."""
    if depth > TAGGED_MAX_DEPTH + 2 or not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise TaggedError("malformed tagged value")
    tag, args = data[0], data[1:]
    try:
        return _DECODERS[tag](args, depth)
    except KeyError:
        raise TaggedError(f"unknown tag {tag!r}") from None
    except TaggedError:
        raise
    except (ValueError, TypeError, OverflowError, IndexError, decimal.InvalidOperation) as exc:
        raise TaggedError(f"bad {tag} value: {type(exc).__name__}: {exc}") from exc


def _want(args: list, *types: type) -> list:
    if len(args) != len(types) or not all(isinstance(a, t) for a, t in zip(args, types)):
        raise TaggedError("wrong arguments")
    return args


def _d_int(args: list, depth: int) -> int:
    (text,) = _want(args, str)
    if len(text) > _MAX_INT_DIGITS + 1:
        raise TaggedError("int too long")
    return int(text)


def _d_bool(args: list, depth: int) -> bool:
    (v,) = _want(args, bool)
    return v


def _d_seq(kind: type) -> Any:
    def decode(args: list, depth: int) -> Any:
        (items,) = _want(args, list)
        return kind(decode_tagged(item, depth + 1) for item in items)

    return decode


def _d_dict(args: list, depth: int) -> dict:
    (pairs,) = _want(args, list)
    out = {}
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            raise TaggedError("malformed dict item")
        out[decode_tagged(pair[0], depth + 1)] = decode_tagged(pair[1], depth + 1)
    return out


def _d_np(args: list, depth: int) -> Any:
    import numpy as np

    dtype_str, payload = _want(args, str, str)
    dtype = np.dtype(dtype_str)
    if dtype.kind not in _NUMPY_SCALAR_KINDS or dtype.fields or dtype.hasobject:
        raise TaggedError(f"numpy dtype {dtype_str!r} is not a scalar kind")
    raw = base64.b64decode(payload, validate=True)
    if len(raw) != dtype.itemsize:
        raise TaggedError("numpy scalar size mismatch")
    return np.frombuffer(raw, dtype=dtype)[0]


def _d_objarray(args: list, depth: int) -> Any:
    import numpy as np

    shape, order, items = _want(args, list, str, list)
    if order not in ("C", "F") or not all(type(n) is int and n >= 0 for n in shape):
        raise TaggedError("bad object array layout")
    if math.prod(shape) != len(items):
        raise TaggedError("object array shape does not match its items")
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = decode_tagged(item, depth + 1)
    return out.reshape(shape, order=order)


def _d_timestamp(args: list, depth: int) -> Any:
    import pandas as pd

    value, unit, tz = args if len(args) == 3 else (None, None, None)
    if type(value) is not int or unit not in ("s", "ms", "us", "ns") or not (tz is None or isinstance(tz, str)):
        raise TaggedError("bad timestamp")
    stamp = pd.Timestamp(value, unit="ns").as_unit(unit)
    if tz is None:
        return stamp
    zone = _tz_from_name(tz) if tz.startswith("offset:") else tz  # a name: pandas picks its own zone type
    return stamp.tz_localize("UTC").tz_convert(zone)


def _d_pd_timedelta(args: list, depth: int) -> Any:
    import pandas as pd

    value, unit = _want(args, int, str)
    if unit not in ("s", "ms", "us", "ns"):
        raise TaggedError("bad timedelta unit")
    return pd.Timedelta(value, unit=unit).as_unit(unit)


def _d_period(args: list, depth: int) -> Any:
    import pandas as pd

    ordinal, freq = _want(args, int, str)
    return pd.Period(ordinal=ordinal, freq=freq)


def _d_interval(args: list, depth: int) -> Any:
    import pandas as pd

    left, right, closed = args if len(args) == 3 else (None, None, None)
    if closed not in ("left", "right", "both", "neither"):
        raise TaggedError("bad interval")
    return pd.Interval(decode_tagged(left, depth + 1), decode_tagged(right, depth + 1), closed=closed)


def _d_datetime(args: list, depth: int) -> Any:
    text, fold = _want(args, str, int)
    return _dt.datetime.fromisoformat(text).replace(fold=fold)


def _na(args: list, depth: int) -> Any:
    import pandas as pd

    _want(args)
    return pd.NA


def _nat(args: list, depth: int) -> Any:
    import pandas as pd

    _want(args)
    return pd.NaT


def _none(args: list, depth: int) -> None:
    _want(args)
    return None


_DECODERS: dict[str, Any] = {
    "none": _none,
    "bool": _d_bool,
    "int": _d_int,
    "float": lambda a, d: float(_want(a, str)[0]),
    "str": lambda a, d: _want(a, str)[0],
    "complex": lambda a, d: complex(float(_want(a, str, str)[0]), float(a[1])),
    "bytes": lambda a, d: base64.b64decode(_want(a, str)[0], validate=True),
    "bytearray": lambda a, d: bytearray(base64.b64decode(_want(a, str)[0], validate=True)),
    "list": _d_seq(list),
    "tuple": _d_seq(tuple),
    "set": _d_seq(set),
    "frozenset": _d_seq(frozenset),
    "dict": _d_dict,
    "decimal": lambda a, d: decimal.Decimal(_want(a, str)[0][:400]),
    "datetime": _d_datetime,
    "date": lambda a, d: _dt.date.fromisoformat(_want(a, str)[0]),
    "time": lambda a, d: _dt.time.fromisoformat(_want(a, str)[0]),
    "timedelta": lambda a, d: _dt.timedelta(*_want(a, int, int, int)),
    "np": _d_np,
    "objarray": _d_objarray,
    "NA": _na,
    "NaT": _nat,
    "timestamp": _d_timestamp,
    "pd_timedelta": _d_pd_timedelta,
    "period": _d_period,
    "interval": _d_interval,
}
