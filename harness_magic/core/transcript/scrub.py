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
_HEADER_HINTS = ("authorization", "api-key", "api_key")
"""Lower-case substrings every ``_HEADER`` match contains."""
_TOKEN_HINTS = ("sk-", "AKIA", "AIza", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xoxa-", "xoxb-",
                "xoxp-", "xoxr-", "xoxs-", "hf_", "gsk_")
"""Substrings every ``_TOKENS`` match contains (case-sensitive, like the pattern)."""
_BEARER = re.compile(r"\b(bearer\s+)([A-Za-z0-9._~+/-]{8,}=*)", re.IGNORECASE)

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Treat ``value`` (an API key given in code or config) as a secret from now on."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


_env_memo: list[Any] = [None, set()]
"""[environment snapshot, credential values found in it]: the scan runs again only when the environment changed."""


def _environment_secrets() -> set[str]:
    data = getattr(os.environ, "_data", None)  # the raw mapping: a snapshot costs no decoding
    snapshot = tuple(data.items()) if isinstance(data, dict) else tuple(os.environ.items())
    if _env_memo[0] != snapshot:
        found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
        _env_memo[:] = [snapshot, found]
    return _env_memo[1]


def known_secrets() -> list[str]:
    """Registered keys and credential-named environment values, longest first."""
    found = set(_environment_secrets())
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
    # Pre-checks skip a pattern that cannot match (the patterns cost ~0.1 ms per KB each). Only for ASCII
    # text, where IGNORECASE equals comparing lower(); anything else always runs every pattern.
    ascii_text = text.isascii()
    low = text.lower() if ascii_text else ""
    if not ascii_text or any(hint in low for hint in _HEADER_HINTS):
        text = _HEADER.sub(lambda m: m[0] if m["value"] == REDACTED
                           else f"{m['name']}{m['sep']}{m['scheme'] or ''}{REDACTED}", text)
    if not ascii_text or "bearer" in low:
        text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
    if not ascii_text or any(hint in text for hint in _TOKEN_HINTS):
        text = _TOKENS.sub(REDACTED, text)
    return text


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
