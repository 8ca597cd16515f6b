"""Checks of what a user types: ``%%agent`` flags, magic arguments and ``AgentMagics`` settings.

Each check returns the value (normalised) or raises naming the bad value in
one line: magic arguments raise IPython's :class:`UsageError` (IPython prints
it without a traceback); :func:`check_setting` raises :class:`ValueError`,
which ``AgentMagics`` turns into a ``TraitError`` for ``%config``. The
boundaries themselves are the core's; these only word the errors.

Constants mirrored from the core are not imported from it, so that
``%load_ext`` stays cheap.
"""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

__all__ = ["check_handle", "cap_arg", "split_pair", "validate_model", "check_setting", "CHECKED_SETTINGS",
           "LIVE_MODES", "SANDBOX_MODES", "OFFLINE_PREFIXES", "DEFAULT_MODEL", "PROMPT_CACHING_MODES", "MAX_CAP",
           "BUDGET_SETTINGS", "BUDGET_FLAGS"]

LIVE_MODES = ("auto", "widgets", "rich", "off")
"""``auto``: widgets in a kernel, rich in a terminal; ``off``: final output only."""
SANDBOX_MODES = ("worker", "inprocess", "unconfined")
"""Mirrors :data:`harness_magic.core.session.SANDBOX_MODES` (not imported: loading stays cheap)."""
OFFLINE_PREFIXES = ("offline/", "scripted/", "replay/")
"""Mirrors :data:`harness_magic.core.providers.offline.OFFLINE_PREFIXES`."""
DEFAULT_MODEL = "openai/gpt-4o-mini"
"""Mirrors :data:`harness_magic.core.session.DEFAULT_MODEL`."""
PROMPT_CACHING_MODES = ("auto", "on", "off")
"""Mirrors :data:`harness_magic.core.providers.adapter.PROMPT_CACHING_MODES`."""
MAX_CAP = 2**63 - 1
"""Mirrors :data:`harness_magic.core.execution.connectors.lazy.MAX_CAP` (64-bit row and byte counts)."""
BUDGET_SETTINGS = ("max_tokens", "max_cost_usd", "max_wall_s", "max_tool_calls")
"""Budget settings: applied to every run (no new session needed); ``%%agent`` flags override them per cell."""
BUDGET_FLAGS = ("--max-tokens", "--max-cost", "--max-wall", "--max-tool-calls")
"""The ``%%agent`` flags for the budget fields, in ``BUDGET_SETTINGS`` order."""


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
    or a ``scripted/``/``replay/`` file that exists; else a UsageError naming it."""
    if not isinstance(model, str) or not model.strip() or any(c.isspace() for c in model):
        raise UsageError(f"bad model {model!r}: give a litellm model id such as {DEFAULT_MODEL!r} or 'offline/quickstart'")
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


_CHOICES = {"sandbox": SANDBOX_MODES, "live": LIVE_MODES, "prompt_caching": PROMPT_CACHING_MODES}
"""Settings that take one of a few words."""
_AT_LEAST_ONE = ("max_turns", "hot_count")
_CAPS = ("materialize_max_bytes", "materialize_max_rows")
CHECKED_SETTINGS = (*_CHOICES, *_AT_LEAST_ONE, *_CAPS, "memory_budget", *BUDGET_SETTINGS, "connectors",
                    "context_window")
"""The settings :func:`check_setting` checks (``model`` has :func:`validate_model`)."""


def check_setting(name: str, value: Any) -> Any:
    """``value`` when it is valid for setting ``name`` (one of :data:`CHECKED_SETTINGS`, already of the trait's
    type); else a ValueError naming the setting and the value."""
    if name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ValueError(f"{name} {value!r} is not valid; allowed: {', '.join(_CHOICES[name])}")
    elif name in _AT_LEAST_ONE:
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    elif name in _CAPS:
        unit = "bytes" if name.endswith("bytes") else "rows"
        if not 1 <= value <= MAX_CAP:
            raise ValueError(f"{name} must be a number of {unit} from 1 to {MAX_CAP:,}, got {value}")
    elif name == "memory_budget":
        if value is not None and value < 0:
            raise ValueError(f"memory_budget must be a number of bytes >= 0, got {value}")
    elif name in BUDGET_SETTINGS:
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive or None, got {value}")
    elif name == "connectors":
        from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES  # built-in and plugin types

        for entry in value:
            if entry.get("type") not in CONNECTOR_TYPES:
                raise ValueError(f"connector {entry!r} needs a 'type' of {', '.join(CONNECTOR_TYPES.names())}")
    elif name == "context_window":
        if value is not None and value < 1:
            raise ValueError(f"context_window must be a positive number of tokens or None, got {value}")
    else:
        raise ValueError(f"no check for setting {name!r}; checked: {', '.join(CHECKED_SETTINGS)}")
    return value
