"""One scrubber for secrets, one escaper for control bytes.

:func:`scrub` is applied to every text that leaves the harness for a human or
a file: provider error messages, tool errors, every JSONL log line, every
export, ``RunResult.error``. It removes

* the configured API keys: values of environment variables whose names say
  they hold a credential (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET*``,
  ``*_PASSWORD``, ...) and keys handed to the harness (:func:`register_secret`);
* the value of any ``Authorization`` / ``Proxy-Authorization`` / ``api-key`` /
  ``x-api-key`` header, however it is quoted (``Authorization: Bearer x``,
  ``'authorization': 'Bearer x'``, ``"api-key":"x"``);
* key-shaped tokens (``sk-...``, ``sk-ant-...``, ``AKIA...``, ``AIza...``,
  ``ghp_...``, ``xox?-...``, ``hf_...``, ``gsk_...``, ``Bearer <token>``),
  matched only as whole words so base64 image data is never touched.

Each becomes :data:`REDACTED`. Scrubbing is idempotent and never raises.

:func:`escape_control` makes model and data text safe to print on a terminal:
every C0/C1 control character and DEL except newline and tab (ESC, CSI, OSC,
BEL, CR, backspace, ...) is shown as a visible escape (``\\x1b``, ``\\r``), so
text cannot move the cursor, retitle the window, hide a line or forge output.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

__all__ = ["REDACTED", "scrub", "scrub_data", "register_secret", "known_secrets", "escape_control"]

REDACTED = "[REDACTED]"

MIN_SECRET_CHARS = 8
"""Shorter configured values are not treated as secrets: replacing them would garble ordinary text."""

_SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(?:_|$)",
                          re.IGNORECASE)
"""Environment variable names whose values are credentials: one underscore-separated word of the name
says so (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``; not ``GIT_AUTHOR_NAME``)."""

_HEADER = re.compile(
    r"""(?P<name>\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]key|\bx-goog-api-key)"""
    r"""(?P<sep>["']?\s*[:=]\s*["']?)"""
    r"""(?P<scheme>(?:bearer|basic|token)\s+)?"""
    r"""(?P<value>\[REDACTED\]|[^\s"',;}\[\]\\]+)""",
    re.IGNORECASE,
)

_WORD = r"(?<![A-Za-z0-9+/=_-])"
_END = r"(?![A-Za-z0-9+/=_-])"
_TOKENS = re.compile(
    _WORD + r"(?:"
    r"sk-(?:ant-|proj-|or-)?[A-Za-z0-9_-]{16,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|hf_[A-Za-z0-9]{30,}"
    r"|gsk_[A-Za-z0-9]{30,}"
    r")" + _END
)
_BEARER = re.compile(r"\b(bearer\s+)([A-Za-z0-9._~+/-]{8,}=*)", re.IGNORECASE)

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Treat ``value`` (an API key given in code or config) as a secret from now on."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


def known_secrets() -> list[str]:
    """Registered keys and credential-named environment values, longest first."""
    found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    with _lock:
        found |= _registered
    return sorted(found, key=len, reverse=True)


def scrub(text: Any) -> Any:
    """``text`` without secrets (see the module docstring); non-strings are returned unchanged."""
    if not isinstance(text, str) or not text:
        return text
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _HEADER.sub(lambda m: m[0] if m["value"] == REDACTED
                       else f"{m['name']}{m['sep']}{m['scheme'] or ''}{REDACTED}", text)
    text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
    return _TOKENS.sub(REDACTED, text)


def scrub_data(value: Any) -> Any:
    """A copy of ``value`` (JSON-like data) with every string scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_data(k): scrub_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_data(v) for v in value)
    return value


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x07": "\\x07", "\x08": "\\x08", "\x0b": "\\x0b", "\x0c": "\\x0c"}


def escape_control(text: Any) -> str:
    """``text`` with control characters (all but newline and tab) shown as escapes."""
    text = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)
