"""The one formatter every tool result passes through (first version).

Rule the model learns: small things are inlined, large or structured things
become cache handles with a snapshot. Everything returned is bounded.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from harness_magic.core.tools import ToolOutput

__all__ = [
    "format_tool_output",
    "format_exception",
    "truncate_middle",
    "INLINE_STR_MAX_CHARS",
    "INLINE_JSON_MAX_CHARS",
    "REPR_MAX_CHARS",
]

INLINE_STR_MAX_CHARS = 2_000
"""Strings up to this length are shown verbatim; longer ones are cached."""
INLINE_JSON_MAX_CHARS = 2_000
"""Dicts and lists whose JSON fits here are inlined; larger ones are cached."""
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


def _cached(cache: Any, preferred_name: str, value: Any) -> ToolOutput:
    handle = cache.put(preferred_name, value)
    snapshot = json.dumps(cache.snapshot(handle), ensure_ascii=False)
    return ToolOutput(text=f"Saved as `{handle}`\nSnapshot: {snapshot}", handles=[handle])


def format_tool_output(value: Any, cache: Any, preferred_name: str) -> ToolOutput:
    """Model-visible form of any tool result; large values go to ``cache``."""
    import numpy as np
    import pandas as pd

    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, BaseException):
        return ToolOutput(text=format_exception(value), is_error=True)
    if value is None or isinstance(value, (bool, int, float, np.generic)):
        return ToolOutput(text=str(value))
    if isinstance(value, (pd.DataFrame, pd.Series, np.ndarray)):
        return _cached(cache, preferred_name, value)
    if isinstance(value, str):
        if len(value) <= INLINE_STR_MAX_CHARS:
            return ToolOutput(text=value)
        return _cached(cache, preferred_name, value)
    if isinstance(value, (dict, list, tuple)):
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = None
        if text is not None and len(text) <= INLINE_JSON_MAX_CHARS:
            return ToolOutput(text=text)
        return _cached(cache, preferred_name, value)
    return ToolOutput(text=truncate_middle(repr(value), REPR_MAX_CHARS))
