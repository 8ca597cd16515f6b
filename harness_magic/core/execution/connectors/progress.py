"""Engine progress as transcript events: the one callback shape both SQL engines report through.

An engine calls ``progress(percent or None, done)`` from its polling thread (or
Spark's progress handler) while a statement runs; :func:`progress_reporter`
turns those calls into :class:`~harness_magic.core.transcript.events.EngineProgress`
events on the tool's harness. A display failure never fails the query.
"""

from __future__ import annotations

from typing import Callable

from harness_magic.core.execution.connectors.registry import ToolContext

__all__ = ["Progress", "progress_reporter"]

Progress = Callable[[float | None, bool], None]
"""``progress(percent or None, done)``: called from a polling thread while a statement runs."""


def progress_reporter(context: ToolContext, engine: str) -> Progress | None:
    """Progress callback emitting :class:`EngineProgress` events on the tool's harness; None without a harness."""
    if context.harness is None:
        return None
    emit = context.harness.emit
    from harness_magic.core.transcript.events import EngineProgress

    def report(percent: float | None, done: bool) -> None:
        try:
            emit(EngineProgress(engine=engine, percent=percent, done=done))
        except Exception:  # a display problem must not fail the query
            pass

    return report
