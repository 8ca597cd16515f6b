"""Checks of what a user types: ``%%agent`` flags and magic arguments.

Each check returns the value (normalised) or raises IPython's
:class:`UsageError` naming the bad value in one line (IPython prints it
without a traceback). ``AgentMagics`` settings are checked by their one
validator in the core's table (:data:`harness_magic.core.config.SETTINGS`);
a flag that sets a setting for one cell uses that validator too.

Constants mirrored from deeper in the core are not imported from it, so
that ``%load_ext`` stays cheap.
"""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

__all__ = ["check_handle", "cap_arg", "split_pair", "validate_model", "flag_value", "LIVE_MODES", "OFFLINE_PREFIXES",
           "MAX_CAP", "BUDGET_FLAGS"]

LIVE_MODES = ("auto", "widgets", "rich", "off")
"""``auto``: widgets in a kernel, rich in a terminal; ``off``: final output only."""
OFFLINE_PREFIXES = ("offline/", "scripted/", "replay/")
"""Mirrors :data:`harness_magic.core.providers.offline.OFFLINE_PREFIXES`."""
MAX_CAP = 2**63 - 1
"""Mirrors :data:`harness_magic.core.execution.connectors.lazy.MAX_CAP` (64-bit row and byte counts)."""
BUDGET_FLAGS = {"max_tokens": "--max-tokens", "max_cost_usd": "--max-cost", "max_wall_s": "--max-wall",
                "max_tool_calls": "--max-tool-calls", "max_query_rows": "--max-query-rows",
                "max_query_cost": "--max-query-cost", "max_write_operations": "--max-write-operations"}
"""The ``%%agent`` flag setting each per-run budget for one cell (over ``AgentMagics``' value)."""


def check_handle(name: str, what: str) -> str:
    """``name`` when it is a Python identifier (and not a keyword); else a UsageError naming it as ``what``."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"bad {what} {name!r}: it must be a valid Python identifier")
    return name


def cap_arg(text: Any, flag: str, unit: str) -> int:
    """A ``--max-bytes``/``--max-rows`` value: a whole number 1..MAX_CAP (``1_000_000`` and ``1e6`` too)."""
    raw = str(text).strip().replace("_", "")
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    if raw.isascii() and raw.isdigit() and len(raw.lstrip("0")) > len(str(MAX_CAP)):
        raise UsageError(f"{flag} must be at most {MAX_CAP:,} {unit}, got {shown}")
    try:
        value = int(raw) if raw.isascii() and raw.lstrip("+-").isdigit() else _whole(float(raw))
    except (ValueError, OverflowError):
        raise UsageError(f"{flag} must be a whole number of {unit} >= 1, got {shown!r}") from None
    if value < 1:
        raise UsageError(f"{flag} must be a number of {unit} >= 1, got {value}")
    if value > MAX_CAP:
        raise UsageError(f"{flag} must be at most {MAX_CAP:,} {unit}, got {shown}")
    return value


def _whole(number: float) -> int:
    """``1e6`` as 1000000; ValueError for fractions, NaN; OverflowError for infinities."""
    if not number.is_integer():
        raise ValueError(number)
    return int(number)


def split_pair(spec: str, what: str) -> tuple[str, str]:
    """``"A=B"`` as ``(A, B)``, ``"A"`` as ``(A, A)``; a UsageError for ``"A="`` (``what`` names the flag)."""
    left, sep, right = spec.partition("=")
    if sep and not right:
        raise UsageError(f"bad {what} {spec!r}: nothing after '='")
    return left, right or left


def validate_model(model: str) -> str:
    """``model`` when it is a model id this kernel can use: a litellm id, a built-in ``offline/`` script,
    or a ``scripted/``/``replay/`` file that exists; else a UsageError naming it (the id's form is the
    ``model`` setting's validator)."""
    flag_value("model", model, "model")
    if model.startswith("offline/"):
        from harness_magic.core.providers.offline import builtin_scripts

        name = model.partition("/")[2]
        if name not in builtin_scripts():
            raise UsageError(f"no built-in offline model {model!r}; allowed: "
                             + ", ".join(f"offline/{s}" for s in builtin_scripts()))
    elif model.startswith(("scripted/", "replay/")):
        path = model.partition("/")[2]
        if not Path(path).is_file():
            raise UsageError(f"model {model!r}: file {path!r} not found (relative to {Path.cwd()})")
    return model


def flag_value(setting: str, value: Any, flag: str) -> Any:
    """``value`` of a flag that sets ``setting`` for one cell, checked by the setting's one validator (the
    message names ``flag``); a UsageError otherwise."""
    from harness_magic.core.config import setting_named

    try:
        return setting_named(setting).validate(value, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
