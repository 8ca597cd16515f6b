"""Showing a run as it streams: which live view a cell gets, displaying it, and settling it.

One output per cell: :func:`show_live` displays the live view (widgets only,
no text copy); when the run returns, :func:`settle` empties that output in
place so the cell's value (the final form) replaces it. After an error the
view stays, so what happened remains visible.
"""

from __future__ import annotations

from typing import Any

from harness_magic.notebook.arguments import LIVE_MODES

__all__ = ["live_renderer", "show_live", "settle"]


def live_renderer(mode: str, in_kernel: bool, owner: Any) -> tuple[Any, Any]:
    """(event handler or None, widget to display or None) for ``mode`` (one of :data:`LIVE_MODES`).

    ``auto`` is widgets in a kernel, rich in a terminal; ``off`` is neither.
    ``owner`` (the magics) keeps the session's "copy code" clipboard.
    """
    if mode not in LIVE_MODES:
        raise ValueError(f"live mode {mode!r} is not valid; allowed: {', '.join(LIVE_MODES)}")
    if mode == "auto":
        mode = "widgets" if in_kernel else "rich"
    if mode == "widgets":
        from harness_magic.notebook.clipboard import code_clipboard
        from harness_magic.notebook.render import WidgetRunView

        view = WidgetRunView(clipboard=code_clipboard(owner))  # a "copy code" button per call
        return view, view.widget
    if mode == "rich":
        from harness_magic.notebook.render import TerminalRenderer

        return TerminalRenderer(), None
    return None, None


def show_live(widget: Any) -> Any:
    """Display the live view as a widget-only output (no text copy); returns its display handle."""
    from IPython.display import display

    bundle = {k: v for k, v in widget._repr_mimebundle_().items() if k != "text/plain"}
    return display(bundle, raw=True, display_id=True)


def settle(handle: Any, view: Any, *, settled: bool) -> None:
    """End of the live view: when the run returned, its output is emptied in place and the view's
    widgets close, because the cell's value (the final form) replaces it; after an error the view stays."""
    if settled:
        handle.update({}, raw=True)
        view.close()
    else:
        view.stop()
