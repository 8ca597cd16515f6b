"""The notebook's magics, from one place: ``%load_ext harness_magic`` loads them.

The parts, each its own module:

- :mod:`.agent_magics`: :class:`AgentMagics` (``%%agent``, ``%agent_vars``,
  ``%agent_push``/``%agent_pull``, ``%agent_export``, ``%agent_sandbox``) and
  its settings (``%config AgentMagics.*``);
- :mod:`.control_magics`, :mod:`.docs_magics`, :mod:`.eval_magics`: the
  other magics classes, driving ``AgentMagics``' session;
- :mod:`.extension`: load and unload over the one :func:`magics_classes` list;
- :mod:`.arguments`: checks of magic arguments and settings;
- :mod:`.live`: the live view of a running cell; :mod:`.render` draws it;
- :mod:`.tables`: the tables the line magics show;
- :mod:`.values`: copies of values crossing to and from the agent's cache.

This module re-exports their public names, so
``from harness_magic.notebook.magics import AgentMagics`` (and the rest) keeps working.
"""

from __future__ import annotations

from harness_magic.notebook.agent_magics import AgentMagics
from harness_magic.notebook.arguments import (
    DEFAULT_MODEL,
    LIVE_MODES,
    MAX_CAP,
    OFFLINE_PREFIXES,
    PROMPT_CACHING_MODES,
    SANDBOX_MODES,
)
from harness_magic.notebook.extension import agent_session, load_extension, magics_classes, unload_extension
from harness_magic.notebook.tables import (
    export_rows_html,
    handle_rows,
    rows_text,
    sandbox_rows,
    table_html,
    table_text,
)
from harness_magic.notebook.values import copy_value

__all__ = ["AgentMagics", "load_extension", "unload_extension", "magics_classes", "agent_session", "LIVE_MODES"]
# The other names imported above are kept importable from here for existing callers; their homes are the
# modules named in the docstring.
