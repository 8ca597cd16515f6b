"""Showing a run as it streams: which live view a cell gets, displaying it, and settling it.

One output per cell: :func:`show_live` displays the live view (widgets only,
no text copy); when the run returns, :func:`settle` empties that output in
place so the cell's value (the final form) replaces it. After an error the
view stays, so what happened remains visible.

The live view shows what the model saw. With ``AgentMagics.show_real_values``
the person at the keyboard sees the real values instead: each event the live
view gets has its pseudonyms restored (:class:`RevealingView`, through
:meth:`~harness_magic.core.control.pseudonyms.Pseudonyms.reveal_text`), and
that view is emptied when the run ends, even after an error. The run record,
the log, the history, the cell's final output (what a saved notebook holds)
and exports are built from the events as the model saw them, never from the
view.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

from harness_magic.notebook.arguments import LIVE_MODES

__all__ = ["live_renderer", "show_live", "settle", "RevealingView", "reveal_event", "REVEAL_MAX_DEPTH"]

REVEAL_MAX_DEPTH = 12
"""Deepest an event's nested values are followed when restoring their pseudonyms for the live view."""


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
        return _revealing(view, owner), view.widget
    if mode == "rich":
        from harness_magic.notebook.render import TerminalRenderer

        renderer = TerminalRenderer()  # in a kernel its text is the cell's output (saved): never revealed there
        return (renderer if in_kernel else _revealing(renderer, owner)), None
    return None, None


def _revealing(view: Any, owner: Any) -> Any:
    """``view``, or a :class:`RevealingView` of it when ``owner.show_real_values`` is on (no owner: ``view``)."""
    if owner is None or not owner.show_real_values:
        return view
    return RevealingView(view, owner.session.pseudonyms.reveal_text)


class RevealingView:
    """A live view whose events have their pseudonyms restored first (``show_real_values``); everything else
    (closing, questions and approvals shown in it) is the wrapped view's."""

    def __init__(self, view: Any, reveal: Callable[[str], str]) -> None:
        self.view = view
        self.reveal = reveal

    def __call__(self, event: Any) -> None:
        self.view(reveal_event(event, self.reveal))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)


def reveal_event(value: Any, reveal: Callable[[str], str], depth: int = 0) -> Any:
    """A copy of ``value`` (an event: dataclasses, lists, tuples, dicts, strings) with ``reveal`` applied to every
    string, followed :data:`REVEAL_MAX_DEPTH` levels; other objects are the same objects (never changed)."""
    if isinstance(value, str):
        return reveal(value)
    if depth >= REVEAL_MAX_DEPTH:
        return value
    if isinstance(value, list):
        return [reveal_event(v, reveal, depth + 1) for v in value]
    if type(value) is tuple:  # a named tuple is left as it is
        return tuple(reveal_event(v, reveal, depth + 1) for v in value)
    if isinstance(value, dict):
        return {k: reveal_event(v, reveal, depth + 1) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for one in dataclasses.fields(value):
            old = getattr(value, one.name)
            new = reveal_event(old, reveal, depth + 1)
            if new is not old:
                changed[one.name] = new
        if not changed:
            return value
        out = copy.copy(value)  # the event itself stays as the model saw it (the recorder and log read it)
        for name, new in changed.items():
            object.__setattr__(out, name, new)
        return out
    return value


def show_live(widget: Any) -> Any:
    """Display the live view as a widget-only output (no text copy); returns its display handle."""
    from IPython.display import display

    bundle = {k: v for k, v in widget._repr_mimebundle_().items() if k != "text/plain"}
    return display(bundle, raw=True, display_id=True)


def settle(handle: Any, view: Any, *, settled: bool) -> None:
    """End of the live view: when the run returned, its output is emptied in place and the view's
    widgets close, because the cell's value (the final form) replaces it; after an error the view stays,
    unless it showed real values (:class:`RevealingView`): a saved notebook never holds them."""
    if settled or isinstance(view, RevealingView):
        handle.update({}, raw=True)
        view.close()
    else:
        view.stop()
