"""The one formatter every tool result passes through.

Rule the model learns: small things are inlined, large or structured things
become cache handles with a snapshot. Precisely, :func:`format_tool_output`
turns a value into a :class:`ToolOutput` as follows:

========================================  =====================================
value                                     model sees
========================================  =====================================
``ToolOutput``                            itself (already formatted)
exception                                 ``Type: message`` with ``is_error``
``None``, bool, number, date, scalar      its text, inline
``str`` up to INLINE_STR_MAX_CHARS        the string, inline
longer ``str``                            a handle + snapshot (length, head, tail)
``DataFrame``/``Series``/``ndarray``/     always a handle + snapshot,
``Index``/extension array, engine value   whatever the size (an engine value's
(lazy relation)                           snapshot comes from its engine)
dict/list/tuple/set, small and plain      compact JSON, inline
dict/list/..., large or holding frames    a handle + snapshot
``bytes`` short / long                    inline repr / handle
anything else                             ``repr`` cut to REPR_MAX_CHARS
========================================  =====================================

Everything returned is bounded: snapshots by ``SNAPSHOT_MAX_BYTES``, inline
text by the constants below, so the text for a 10-million-row frame is the
text for a 100-row frame with the same columns (only the row count differs).
The work done is bounded too: containers are inspected up to
INLINE_MAX_ITEMS nodes, never serialised whole.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import sys
import traceback
from typing import Any

from harness_magic.core.cache.guard import ColumnSources
from harness_magic.core.cache.engine_value import engine_of
from harness_magic.core.cache.names import sanitize_identifier
from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.cache.snapshot import snapshot_json
from harness_magic.core.execution.tools import ToolOutput

__all__ = [
    "format_tool_output",
    "format_handle",
    "format_exception",
    "truncate_middle",
    "INLINE_STR_MAX_CHARS",
    "INLINE_JSON_MAX_CHARS",
    "INLINE_MAX_ITEMS",
    "REPR_MAX_CHARS",
]

INLINE_STR_MAX_CHARS = 2_000
"""Strings up to this length are shown verbatim; longer ones are cached."""
INLINE_JSON_MAX_CHARS = 2_000
"""Dicts and lists whose JSON fits here are inlined; larger ones are cached."""
INLINE_MAX_ITEMS = 500
"""Containers with more nodes than this are cached without serialising them (bounded work)."""
REPR_MAX_CHARS = 1_000
"""Fallback repr of unknown objects is cut to this many characters."""


def truncate_middle(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else head + marker + tail."""
    if len(text) <= limit:
        return text
    keep = max(limit - 60, 20)
    head, tail = text[: keep // 2], text[-(keep - keep // 2) :]
    return f"{head}\n... [{len(text) - len(head) - len(tail)} characters omitted] ...\n{tail}"


def format_exception(exc: BaseException, *, with_traceback: bool = False) -> str:
    """Readable one-paragraph error text for the model."""
    if with_traceback:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    else:
        text = f"{type(exc).__name__}: {exc}"
    return truncate_middle(text, INLINE_STR_MAX_CHARS)


def format_handle(cache: HandleCache, handle: str, preferred_name: str | None = None) -> str:
    """The model-visible announcement of a cached value: handle, and its snapshot."""
    note = ""
    if preferred_name is not None:
        wanted = sanitize_identifier(preferred_name)
        if wanted != handle:
            note = f" (`{wanted}` was taken)"
    return f"Saved as `{handle}`{note}\nSnapshot: {snapshot_json(cache.snapshot(handle))}"


def _array_types() -> tuple[type, ...]:
    """The data-object types (frames, series, indexes, arrays) of the modules already imported.

    A value cannot be a pandas or numpy object unless that module is loaded, so asking never imports them:
    a run that moves no frame keeps the data stack out of the kernel."""
    pd, np = sys.modules.get("pandas"), sys.modules.get("numpy")
    types: list[type] = []
    if np is not None:
        types.append(np.ndarray)
    if pd is not None:
        types += [pd.DataFrame, pd.Series, pd.Index, pd.api.extensions.ExtensionArray]
    return tuple(types)


def _numpy_scalar(kind: str) -> tuple[type[Any], ...]:
    """``numpy.<kind>`` (``generic``, ``integer``, ``floating``, ``bool_``) when numpy is loaded, else ()."""
    np = sys.modules.get("numpy")
    return (getattr(np, kind),) if np is not None else ()


def format_tool_output(
    value: Any,
    cache: HandleCache,
    preferred_name: str,
    *,
    turn: int | None = None,
    tool: str | None = None,
    sources: ColumnSources | None = None,
    derived: bool = False,
) -> ToolOutput:
    """Model-visible form of any tool result; large values go to ``cache`` (see module doc).

    ``sources``: the query lineage of a connector's result (output column -> source columns), which the
    cache's entry guard uses to classify columns renamed by the query; ``derived``: the value was computed on
    the agent's side (the interpreter's trailing value)."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, BaseException):
        return ToolOutput(text=format_exception(value), is_error=True)
    if isinstance(value, _array_types()) or engine_of(value) is not None:
        return _cached(cache, preferred_name, value, turn, tool, sources, derived)
    if value is None or isinstance(value, (bool, int, float, complex, decimal.Decimal, _dt.date, _dt.time,
                                           _dt.timedelta, *_numpy_scalar("generic"))):
        return ToolOutput(text=truncate_middle(str(value), INLINE_STR_MAX_CHARS))
    if isinstance(value, str):
        if len(value) <= INLINE_STR_MAX_CHARS:
            return ToolOutput(text=value)
        return _cached(cache, preferred_name, value, turn, tool)
    if isinstance(value, (bytes, bytearray)):
        if len(value) <= REPR_MAX_CHARS // 4:
            return ToolOutput(text=repr(value))
        return _cached(cache, preferred_name, value, turn, tool)
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        text = _inline_json(value)
        if text is not None:
            return ToolOutput(text=text)
        return _cached(cache, preferred_name, value, turn, tool)
    return ToolOutput(text=truncate_middle(_safe_repr(value), REPR_MAX_CHARS))


def _cached(cache: HandleCache, preferred_name: str, value: Any, turn: int | None, tool: str | None,
            sources: ColumnSources | None = None, derived: bool = False) -> ToolOutput:
    handle = cache.put(preferred_name, value, turn=turn, tool=tool, sources=sources, derived=derived)
    return ToolOutput(text=format_handle(cache, handle, preferred_name), handles=[handle])


class _TooBig(Exception):
    """The container is not small and plain: cache it instead."""


def _inline_json(value: Any) -> str | None:
    """Compact valid JSON for a small plain container, or None when it should be cached."""
    budget = [INLINE_MAX_ITEMS]
    try:
        plain = _plain(value, budget)
    except _TooBig:
        return None
    text = json.dumps(plain, ensure_ascii=False, allow_nan=False)
    return text if len(text) <= INLINE_JSON_MAX_CHARS else None


def _plain(value: Any, budget: list[int]) -> Any:
    """JSON-ready copy of ``value``; raises :class:`_TooBig` past the node budget or on data objects."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and len(value) > INLINE_JSON_MAX_CHARS:
            raise _TooBig
        return value
    number: Any = value  # numpy scalars are checked by a runtime tuple, which mypy narrows to object
    if isinstance(value, (int, *_numpy_scalar("integer"))):
        return int(number)
    if isinstance(value, (float, *_numpy_scalar("floating"))):
        f = float(number)
        return None if math.isnan(f) else ("inf" if f == math.inf else "-inf" if f == -math.inf else f)
    if isinstance(value, _numpy_scalar("bool_")):
        return bool(value)
    if isinstance(value, dict):
        if len(value) > budget[0]:
            raise _TooBig
        return {k if isinstance(k, str) else str(k): _plain(v, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        if len(value) > budget[0]:
            raise _TooBig
        return [_plain(v, budget) for v in value]
    if isinstance(value, (*_array_types(), bytes, bytearray)):
        raise _TooBig
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    return truncate_middle(str(value), REPR_MAX_CHARS // 4)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a broken __repr__ still gets an answer
        return f"<{type(value).__name__} object: repr failed with {type(exc).__name__}>"
