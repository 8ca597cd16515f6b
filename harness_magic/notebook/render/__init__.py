"""Live rendering of a run: ipywidgets in a notebook (:mod:`.widgets`), rich in a terminal (:mod:`.terminal`).

Both renderers are event handlers (the loop emits, they subscribe) and fold a
:class:`~harness_magic.core.export.RunRecord` alongside (:mod:`.common`), so the
live form, the final output and the exports render the same content. Every
string from the model or the data is escaped (HTML) or stripped of control
characters (terminal) before it is shown.
"""

from __future__ import annotations

from harness_magic.notebook.render.common import status_text
from harness_magic.notebook.render.terminal import (
    TERMINAL_HEADER_WAIT_S,
    TERMINAL_RESULT_LINES,
    TerminalRenderer,
    strip_control,
    strip_tree,
)
from harness_magic.notebook.render.widgets import STREAM_FLUSH_S, TICK_S, WidgetRunView

__all__ = ["WidgetRunView", "TerminalRenderer", "status_text", "strip_control", "strip_tree", "STREAM_FLUSH_S", "TICK_S",
           "TERMINAL_RESULT_LINES", "TERMINAL_HEADER_WAIT_S"]
