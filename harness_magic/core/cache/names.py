"""Handle naming: valid identifiers, never a silent overwrite."""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection

__all__ = ["sanitize_identifier", "resolve_handle_name", "MAX_HANDLE_LENGTH"]

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
