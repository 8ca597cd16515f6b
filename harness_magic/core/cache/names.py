"""Handle naming: valid identifiers, never a silent overwrite."""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection, Sequence

__all__ = ["sanitize_identifier", "resolve_handle_name", "saved_as", "MAX_HANDLE_LENGTH"]

MAX_HANDLE_LENGTH = 60
"""Handles are typed by the model in code; long names waste tokens."""


def sanitize_identifier(preferred: str) -> str:
    """Turn any preferred name into a valid, non-keyword Python identifier."""
    text = re.sub(r"[^0-9A-Za-z_]+", "_", str(preferred)).strip("_").lower()
    text = re.sub(r"_+", "_", text)[:MAX_HANDLE_LENGTH] or "value"
    if text[0].isdigit():
        text = f"v_{text}"
    if keyword.iskeyword(text) or keyword.issoftkeyword(text) or text in {"save", "print"}:
        text = f"{text}_value"
    return text


def resolve_handle_name(preferred: str, taken: Collection[str]) -> str:
    """The handle a put of ``preferred`` gets: the name if free, else ``name_2``, ``name_3``..."""
    base = sanitize_identifier(preferred)
    if base not in taken:
        return base
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


def saved_as(preferred: str, handles: Sequence[str]) -> str | None:
    """The last of ``handles`` a put of ``preferred`` could have been given (:func:`resolve_handle_name`: the
    name made valid, or it with a ``_2``, ``_3``... suffix), or None: which handle a run saved "under that name"."""
    base = re.escape(sanitize_identifier(preferred))
    pattern = re.compile(rf"{base}(?:_(?:[2-9]|[1-9][0-9]+))?")
    return next((h for h in reversed(handles) if pattern.fullmatch(h)), None)
